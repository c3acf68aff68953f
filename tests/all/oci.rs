//! Policies as OCI artifacts: pushed and pulled through the CNCF
//! distribution registry (on loopback with TLS and basic auth), refused
//! with the reason when a registry lies, and served by the operator from
//! a ConfigMap that names the artifact.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, ObjectMeta, PostParams};
use policyhost::oci::signature::{SigningKey, Trusted, TrustedKey};
use policyhost::oci::{
    self, BlobCache, Client, ClientConfig, Credentials, PullError, PullGrant, Puller, Reference,
};
use policyhost::operator::Registries;
use policyhost::policies::configmap;
use policyhost::policies::report::Annotations;
use policyhost::runtime::Digest;
use rustls::pki_types::CertificateDer;
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, eventually, eventually_within, phase};
use crate::common::hostile_registry::{self, HostileRegistry, Lie};
use crate::common::process::{policyhost, policyhost_with_env, text};
use crate::common::publishing::{apply_grant, policy_map, push_map};
use crate::common::registry::{Registry, USER};
use crate::common::{for_every_namespace, guest_bytes, scratch};
use policyhost::vocabulary::PINNED_ANNOTATION;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_registry_speaks_tls_and_lets_in_only_its_user() {
    let registry = Registry::start().await;
    assert_eq!(registry.status("/v2/", None).await, Some(401), "anonymous");
    assert_eq!(
        registry.status("/v2/", Some((USER, "wrong"))).await,
        Some(401),
        "a wrong password"
    );
    assert_eq!(
        registry
            .status("/v2/", Some((USER, registry.password())))
            .await,
        Some(200),
        "its user"
    );
    assert_eq!(
        registry
            .status(
                "/v2/policies/fanout/tags/list",
                Some((USER, registry.password()))
            )
            .await,
        Some(404),
        "a repository nothing was pushed to"
    );
}

/// A Docker `config.json` / `.dockerconfigjson` with one login.
fn docker_config(registry: &str, user: &str, password: &str) -> Vec<u8> {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    json!({"auths": {registry: {"auth": auth}}})
        .to_string()
        .into_bytes()
}

fn credentials(registry: &str, user: &str, password: &str) -> Credentials {
    Credentials::parse(&docker_config(registry, user, password)).expect("credentials")
}

fn client(ca: CertificateDer<'static>) -> Client {
    Client::new(&ClientConfig {
        extra_roots: vec![ca],
        ..ClientConfig::default()
    })
    .expect("a registry client")
}

/// A fresh cache directory.
fn cache_dir(name: &str) -> PathBuf {
    let dir = scratch().join(format!("artifacts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn grant(prefix: &str, credentials: Credentials) -> PullGrant {
    PullGrant {
        prefixes: vec![prefix.parse().expect("a prefix")],
        credentials,
    }
}

fn reference(text: &str) -> Reference {
    text.parse().expect("a reference")
}

/// Pushes fanout to the registry as `policies/fanout:v1`; its pinned reference.
async fn push_fanout(registry: &Registry) -> Reference {
    let tagged = reference(&format!("{}/policies/fanout:v1", registry.host()));
    let login = credentials(&registry.host(), USER, registry.password());
    let digest = oci::push::push(
        &client(registry.ca()),
        &tagged,
        login.for_registry(&registry.host()),
        &guest_bytes("fanout"),
    )
    .await
    .expect("push fanout");
    tagged.with_digest(digest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_component_is_pulled_by_digest_and_a_restart_pulls_it_from_the_cache() {
    let registry = Registry::start().await;
    let pinned = push_fanout(&registry).await;
    let fanout = guest_bytes("fanout");
    let login = credentials(&registry.host(), USER, registry.password());
    let allowed = grant(&format!("{}/policies/", registry.host()), login);
    let dir = cache_dir("restart");
    let puller =
        |deadline| Puller::new(client(registry.ca()), BlobCache::new(dir.clone()), deadline);
    let pulled = puller(Duration::from_secs(30))
        .pull(&pinned, &allowed, 64 << 20)
        .await
        .expect("the first pull");
    assert!(pulled.from_registry);
    assert_eq!(pulled.component, fanout, "the component pushed");
    assert_eq!(Some(&pulled.manifest), pinned.digest());
    // The tag resolves to the same manifest.
    let tagged = reference(&format!("{}/policies/fanout:v1", registry.host()));
    let by_tag = puller(Duration::from_secs(30))
        .pull(&tagged, &allowed, 64 << 20)
        .await
        .expect("a pull by tag");
    assert_eq!(by_tag.manifest, pulled.manifest);
    // The registry goes away: a new puller on the same cache (a restart)
    // pulls nothing.
    let ca = registry.ca();
    drop(registry);
    let restarted = Puller::new(
        client(ca),
        BlobCache::new(dir.clone()),
        Duration::from_secs(5),
    );
    let cached = restarted
        .pull(&pinned, &allowed, 64 << 20)
        .await
        .expect("served from the cache");
    assert!(!cached.from_registry, "no registry reached");
    assert_eq!(cached.component, fanout);
    // What is cached is served only as the grant allows.
    let other = grant(
        &format!("{}/team-b/", pinned.registry()),
        Credentials::anonymous(),
    );
    let error = restarted
        .pull(&pinned, &other, 64 << 20)
        .await
        .expect_err("not under the grant's prefixes");
    assert_eq!(error.reason(), "RegistryNotAllowed", "{error}");
    // A tag cannot be served from a cache: it may have moved.
    let error = restarted
        .pull(&tagged, &allowed, 64 << 20)
        .await
        .expect_err("the registry is down");
    assert_eq!(error.reason(), "PullFailed", "{error}");
    assert!(error.is_transient(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_component_grown_past_its_recorded_size_is_pulled_again_unread() {
    let registry = Registry::start().await;
    let pinned = push_fanout(&registry).await;
    let fanout = guest_bytes("fanout");
    let login = credentials(&registry.host(), USER, registry.password());
    let allowed = grant(&format!("{}/policies/", registry.host()), login);
    let dir = cache_dir("grown");
    let puller = || {
        Puller::new(
            client(registry.ca()),
            BlobCache::new(dir.clone()),
            Duration::from_secs(30),
        )
    };
    puller()
        .pull(&pinned, &allowed, 64 << 20)
        .await
        .expect("the first pull");
    let cached = dir.join("sha256").join(Digest::of(&fanout).to_hex());
    // Grown to 2 GiB (sparse): read whole, it would take 2 GiB of memory.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cached)
        .expect("the cached component")
        .set_len(2 << 30)
        .expect("grow it");
    let pulled = puller()
        .pull(&pinned, &allowed, 64 << 20)
        .await
        .expect("pulled again");
    assert!(pulled.from_registry, "the grown file is not served");
    assert_eq!(pulled.component, fanout);
    let length = std::fs::metadata(&cached).expect("cached again").len();
    assert_eq!(
        length,
        fanout.len() as u64,
        "the cache holds the component again"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_credentials_and_a_repository_not_granted_are_refused() {
    let registry = Registry::start().await;
    let pinned = push_fanout(&registry).await;
    let prefix = format!("{}/policies/", registry.host());
    let puller = Puller::new(
        client(registry.ca()),
        BlobCache::default(),
        Duration::from_secs(30),
    );
    let refused = |grant: PullGrant| {
        let (puller, pinned) = (puller.clone(), pinned.clone());
        async move {
            puller
                .pull(&pinned, &grant, 64 << 20)
                .await
                .expect_err("refused")
        }
    };
    let anonymous = refused(grant(&prefix, Credentials::anonymous())).await;
    assert_eq!(anonymous.reason(), "PullUnauthorized", "{anonymous}");
    assert!(
        anonymous.to_string().contains("no pull secret"),
        "{anonymous}"
    );
    let wrong = refused(grant(&prefix, credentials(&registry.host(), USER, "wrong"))).await;
    assert_eq!(wrong.reason(), "PullUnauthorized", "{wrong}");
    assert!(
        wrong.to_string().contains("pull secret's credentials"),
        "{wrong}"
    );
    // Another team's repository on the same registry, another registry.
    let login = credentials(&registry.host(), USER, registry.password());
    for prefix in [
        format!("{}/team-b/", registry.host()),
        "registry.example.com/policies/".to_owned(),
    ] {
        let error = refused(grant(&prefix, login.clone())).await;
        assert!(matches!(error, PullError::NotAllowed { .. }), "{error}");
        assert_eq!(error.reason(), "RegistryNotAllowed");
        assert!(error.to_string().contains(&prefix), "{error}");
    }
    let nothing = refused(PullGrant::default()).await;
    assert!(nothing.to_string().contains("(none)"), "{nothing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_lies_is_refused_with_the_reason_and_nothing_it_sent_is_kept() {
    let fanout = guest_bytes("fanout");
    let hostile = HostileRegistry::start(fanout.clone());
    let pinned = reference(&hostile.reference());
    let allowed = grant(
        &format!("{}/{}", hostile.host(), hostile_registry::REPOSITORY),
        Credentials::anonymous(),
    );
    let dir = cache_dir("hostile");
    let puller = Puller::new(
        client(hostile.ca()),
        BlobCache::new(dir.clone()),
        Duration::from_secs(2),
    );
    let elsewhere = format!(
        "https://127.0.0.2:{}",
        hostile.host().rsplit(':').next().unwrap_or("1")
    );
    let size = fanout.len() as u64;
    let tagged = reference(&format!(
        "{}/{}:v1",
        hostile.host(),
        hostile_registry::REPOSITORY
    ));
    // A lie about the manifest shows as a digest mismatch when the
    // reference pins it: those are asked for by tag, to reach the layout.
    let cases: Vec<(Lie, &str, &str, u64)> = vec![
        (
            Lie::ManifestAltered,
            "DigestMismatch",
            "manifest's digest",
            1,
        ),
        (Lie::LayerAltered, "DigestMismatch", "component's digest", 2),
        (
            Lie::ConfigType("application/vnd.oci.image.config.v1+json".into()),
            "NotAComponent",
            "an image that is not a component",
            1,
        ),
        (Lie::Index, "NotAComponent", "manifest list", 1),
        (Lie::DeclaresHuge, "TooLarge", "more than the", 1),
        (Lie::SendsMore, "TooLarge", "over ", 2),
        (
            Lie::RedirectTo(elsewhere.clone()),
            "RegistryNotAllowed",
            "127.0.0.2",
            2,
        ),
        (
            Lie::TokenAt(elsewhere),
            "RegistryNotAllowed",
            "127.0.0.2",
            1,
        ),
        (Lie::Unavailable, "PullFailed", "503", 1),
        (Lie::Stall, "PullFailed", "did not finish within", 1),
    ];
    for (lie, reason, text, requests) in cases {
        let by_tag = matches!(lie, Lie::ConfigType(_) | Lie::Index | Lie::DeclaresHuge);
        let asked = if by_tag { &tagged } else { &pinned };
        let before = hostile.requests();
        hostile.lie(lie.clone());
        let limit = if lie == Lie::SendsMore {
            size
        } else {
            64 << 20
        };
        let error = puller
            .pull(asked, &allowed, limit)
            .await
            .expect_err("a lie is refused");
        assert_eq!(error.reason(), reason, "{lie:?}: {error}");
        assert!(error.to_string().contains(text), "{lie:?}: {error}");
        assert_eq!(
            error.is_transient(),
            matches!(lie, Lie::Unavailable | Lie::Stall),
            "{lie:?}"
        );
        assert_eq!(
            hostile.requests() - before,
            requests,
            "{lie:?}: requests made"
        );
    }
    // Credentials go to the registry, never where it redirects, even to a
    // host the grant allows.
    let port = hostile.host().rsplit(':').next().unwrap_or("1").to_owned();
    let alias = format!("localhost:{port}");
    hostile.lie(Lie::AuthThenRedirectTo(format!("https://{alias}")));
    let both = PullGrant {
        prefixes: [hostile.host(), alias]
            .iter()
            .map(|host| {
                format!("{host}/{}", hostile_registry::REPOSITORY)
                    .parse()
                    .expect("a prefix")
            })
            .collect(),
        credentials: credentials(&hostile.host(), "user", "secret"),
    };
    let before = hostile.authorizations().len();
    let redirected = Puller::new(
        client(hostile.ca()),
        BlobCache::default(),
        Duration::from_secs(5),
    )
    .pull(&pinned, &both, 64 << 20)
    .await
    .expect("pulled through an allowed redirect");
    assert_eq!(redirected.component, fanout);
    let seen = hostile.authorizations()[before..].to_vec();
    assert!(
        seen.iter()
            .any(|(host, authorized)| *authorized && host == &hostile.host()),
        "the registry got the credentials: {seen:?}"
    );
    assert!(
        seen.iter().any(|(host, _)| host.starts_with("localhost")),
        "the redirect was followed: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|(host, authorized)| !authorized || host == &hostile.host()),
        "credentials went elsewhere: {seen:?}"
    );
    // Nothing a lie sent was cached: the truth is pulled from the registry.
    hostile.lie(Lie::None);
    let pulled = puller
        .pull(&pinned, &allowed, 64 << 20)
        .await
        .expect("the honest artifact");
    assert!(pulled.from_registry);
    assert_eq!(pulled.component, fanout);
    assert_eq!(Digest::of(&pulled.component), Digest::of(&fanout));
}

fn signing_key() -> SigningKey {
    SigningKey::generate().expect("a key")
}

fn trusting(name: &str, key: &SigningKey) -> Trusted {
    Trusted::new(vec![
        TrustedKey::from_pem(name, key.public_pem().as_bytes()).expect("a public key"),
    ])
}

/// Pushes `component` to the registry as `policies/<name>:v1` and signs it
/// with `key`, if any: its pinned reference.
async fn push_signed(
    registry: &Registry,
    name: &str,
    component: &[u8],
    key: Option<&SigningKey>,
) -> Reference {
    let tagged = reference(&format!("{}/policies/{name}:v1", registry.host()));
    let login = credentials(&registry.host(), USER, registry.password());
    let client = client(registry.ca());
    let basic = login.for_registry(&registry.host());
    let digest = oci::push::push(&client, &tagged, basic, component)
        .await
        .expect("push");
    if let Some(key) = key {
        oci::push::push_signature(
            &client,
            &tagged,
            basic,
            &digest,
            &key.sign(&tagged, &digest),
        )
        .await
        .expect("push the signature");
    }
    tagged.with_digest(digest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_artifact_a_trusted_key_signed_for_its_own_digest_is_pulled() {
    let registry = Registry::start().await;
    let (platform, stranger) = (signing_key(), signing_key());
    let fanout = guest_bytes("fanout");
    let signed = push_signed(&registry, "fanout", &fanout, Some(&platform)).await;
    let unsigned = push_signed(&registry, "unsigned", &guest_bytes("panics"), None).await;
    let by_stranger = push_signed(
        &registry,
        "stranger",
        &guest_bytes("fanout-next"),
        Some(&stranger),
    )
    .await;
    // A signature by the platform's key, of the signed artifact, put where
    // the unsigned one's signature would be.
    let login = credentials(&registry.host(), USER, registry.password());
    let moved = push_signed(&registry, "moved", &guest_bytes("log-flood"), None).await;
    let signed_digest = *signed.digest().expect("pinned");
    oci::push::push_signature(
        &client(registry.ca()),
        &moved,
        login.for_registry(&registry.host()),
        moved.digest().expect("pinned"),
        &platform.sign(&signed, &signed_digest),
    )
    .await
    .expect("push a misplaced signature");
    let allowed = grant(&format!("{}/policies/", registry.host()), login);
    let dir = cache_dir("signed");
    let puller = Puller::new(
        client(registry.ca()),
        BlobCache::new(dir.clone()),
        Duration::from_secs(30),
    )
    .trusting(trusting("platform", &platform));
    let pulled = puller
        .pull(&signed, &allowed, 64 << 20)
        .await
        .expect("a signed artifact");
    assert_eq!(pulled.component, fanout);
    for (artifact, reason, text) in [
        (&unsigned, "Unsigned", "has no signature"),
        (
            &by_stranger,
            "SignatureInvalid",
            "verifies with a trusted key (platform)",
        ),
        (
            &moved,
            "SignatureInvalid",
            &format!("is for sha256:{signed_digest}") as &str,
        ),
    ] {
        let error = puller
            .pull(artifact, &allowed, 64 << 20)
            .await
            .expect_err("refused");
        assert_eq!(error.reason(), reason, "{artifact}: {error}");
        assert!(error.to_string().contains(text), "{artifact}: {error}");
    }
    // A restart with the registry gone: the signature is checked again,
    // from the cache.
    let ca = registry.ca();
    drop(registry);
    let restarted = Puller::new(
        client(ca.clone()),
        BlobCache::new(dir.clone()),
        Duration::from_secs(5),
    )
    .trusting(trusting("platform", &platform));
    let cached = restarted
        .pull(&signed, &allowed, 64 << 20)
        .await
        .expect("the signed artifact, from the cache");
    assert!(!cached.from_registry);
    let distrusting = Puller::new(client(ca), BlobCache::new(dir), Duration::from_secs(5))
        .trusting(trusting("another", &stranger));
    let error = distrusting
        .pull(&signed, &allowed, 64 << 20)
        .await
        .expect_err("cached, but not signed by a key this host trusts");
    assert_eq!(
        error.reason(),
        "PullFailed",
        "the registry is down: {error}"
    );
}

/// The password of the key files cosign reads and writes here.
const COSIGN_PASSWORD: &str = "test-password";

/// Runs the cosign `cargo xtask cosign` built, against `registry`, in `dir`.
fn cosign(registry: &Registry, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let binary = crate::common::target_dir().join("cosign/bin/cosign");
    assert!(
        binary.is_file(),
        "{} is missing: run `cargo xtask cosign`",
        binary.display()
    );
    let ca = dir.join("registry-ca.pem");
    std::fs::write(&ca, registry.ca_pem()).expect("write the registry's CA");
    let mut command = std::process::Command::new(binary);
    command
        .args(args)
        .arg("--registry-cacert")
        .arg(&ca)
        .args([
            "--registry-username",
            USER,
            "--registry-password",
            registry.password(),
        ])
        .current_dir(dir)
        .env("COSIGN_PASSWORD", COSIGN_PASSWORD)
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"))
        .stdin(std::process::Stdio::null());
    command.output().expect("run cosign")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosign_and_the_host_verify_each_others_signatures_made_with_each_others_key_files() {
    let registry = Registry::start().await;
    let dir = cache_dir("cosign");
    std::fs::create_dir_all(&dir).expect("a directory");
    let generated =
        std::process::Command::new(crate::common::target_dir().join("cosign/bin/cosign"))
            .arg("generate-key-pair")
            .current_dir(&dir)
            .env("COSIGN_PASSWORD", COSIGN_PASSWORD)
            .output()
            .expect("cosign generate-key-pair");
    assert!(
        generated.status.success(),
        "cosign generate-key-pair: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    // The host signs with cosign's key file; cosign verifies.
    let cosign_key = std::fs::read(dir.join("cosign.key")).expect("cosign.key");
    let theirs = SigningKey::from_pem(&cosign_key, Some(COSIGN_PASSWORD.as_bytes()))
        .expect("the host opens cosign's key file");
    let by_host = push_signed(&registry, "fanout", &guest_bytes("fanout"), Some(&theirs)).await;
    let verified = cosign(
        &registry,
        &dir,
        &[
            "verify",
            "--key",
            "cosign.pub",
            "--insecure-ignore-tlog=true",
            &by_host.to_string(),
        ],
    );
    assert!(
        verified.status.success(),
        "cosign verify: {}",
        String::from_utf8_lossy(&verified.stderr)
    );
    // cosign signs with the host's key file; the host verifies.
    let ours = signing_key();
    let file = ours
        .encrypted_pem(COSIGN_PASSWORD.as_bytes())
        .expect("a key file");
    std::fs::write(dir.join("ours.key"), file).expect("write the key file");
    let by_cosign = push_signed(&registry, "theirs", &guest_bytes("fanout-next"), None).await;
    let sign = cosign(
        &registry,
        &dir,
        &[
            "sign",
            "--key",
            "ours.key",
            "--tlog-upload=false",
            "--yes",
            &by_cosign.to_string(),
        ],
    );
    assert!(
        sign.status.success(),
        "cosign sign: {}",
        String::from_utf8_lossy(&sign.stderr)
    );
    let login = credentials(&registry.host(), USER, registry.password());
    let allowed = grant(&format!("{}/policies/", registry.host()), login);
    let puller = Puller::new(
        client(registry.ca()),
        BlobCache::default(),
        Duration::from_secs(30),
    )
    .trusting(trusting("ours", &ours));
    let pulled = puller
        .pull(&by_cosign, &allowed, 64 << 20)
        .await
        .expect("cosign's signature verifies");
    assert_eq!(pulled.component, guest_bytes("fanout-next"));
    let error = puller
        .pull(&by_host, &allowed, 64 << 20)
        .await
        .expect_err("signed by another key");
    assert_eq!(error.reason(), "SignatureInvalid", "{error}");
    // cosign's public key file is one the host trusts as it is.
    let public = std::fs::read(dir.join("cosign.pub")).expect("cosign.pub");
    let puller = Puller::new(
        client(registry.ca()),
        BlobCache::default(),
        Duration::from_secs(30),
    )
    .trusting(Trusted::new(vec![
        TrustedKey::from_pem("cosign", &public).expect("cosign.pub"),
    ]));
    puller
        .pull(&by_host, &allowed, 64 << 20)
        .await
        .expect("signed with cosign's key file");
}

/// Through the operator, on both servers: a policy ConfigMap naming its
/// artifact, the platform team's grant and pull secret.
mod operator {
    use super::*;

    /// Waits until `policy-fanout` serves `component` (the grant's watch may
    /// see the grant after the policy's first load, which then loads again;
    /// a pull that failed is tried again).
    async fn serving(env: &Env, component: &[u8]) {
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        let digest = Digest::of(component).to_hex();
        eventually(&format!("policy-fanout serving sha256:{digest}"), || {
            let (api, digest) = (api.clone(), digest.clone());
            async move {
                let map = api.get("policy-fanout").await.ok()?;
                let annotations = Annotations::read(map.metadata.annotations.as_ref()?);
                (annotations.loaded_digest == Some(digest) && annotations.error.is_none())
                    .then_some(())
            }
        })
        .await;
    }

    /// An operator's setup trusting `registry` (and `trusted`'s keys),
    /// keeping what it pulls in the artifact cache `cache`.
    fn pulling_from(registry: &Registry, cache: &str, trusted: Trusted) -> OperatorSetup {
        OperatorSetup {
            registries: Registries {
                extra_roots: vec![registry.ca()],
                cache_dir: Some(cache_dir(cache)),
                pull_timeout: Duration::from_secs(30),
                trusted,
                signed_namespaces: None,
            },
            ..OperatorSetup::configmaps()
        }
    }

    /// An operator trusting `registry` (and `trusted`'s keys), with the
    /// grant of `fanout` naming its `policies/` and a pull secret for it.
    async fn operator_pulling_from(registry: &Registry, cache: &str, trusted: Trusted) -> Env {
        let env = Env::start_with(pulling_from(registry, cache, trusted)).await;
        grant_registry(&env, registry).await;
        env
    }

    /// The grant of `fanout` naming `registry`'s `policies/`, and a pull
    /// secret for it.
    async fn grant_registry(env: &Env, registry: &Registry) {
        pull_secret(env, "team-a-pull", registry).await;
        apply_grant(
            env,
            "fanout",
            BTreeMap::from([
                (
                    "registries".to_owned(),
                    format!("{}/policies/", registry.host()),
                ),
                ("pullSecret".to_owned(), "team-a-pull".to_owned()),
            ]),
        )
        .await;
    }

    /// The platform team's pull secret for `registry` in the policy namespace.
    async fn pull_secret(env: &Env, name: &str, registry: &Registry) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_owned(),
                ByteString(docker_config(&registry.host(), USER, registry.password())),
            )])),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(env.client.clone(), &env.policy_namespace)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the pull secret");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_policy_named_by_its_artifact_serves_and_a_refused_artifact_leaves_it_serving() {
        let registry = Registry::start().await;
        let pinned = push_fanout(&registry).await;
        let fanout = guest_bytes("fanout");
        let env = operator_pulling_from(&registry, "operator", Trusted::default()).await;
        let publish = |artifact: Reference| {
            configmap::build_artifact(
                "fanout",
                &env.policy_namespace,
                artifact,
                &fanout,
                &for_every_namespace(),
            )
            .expect("a policy ConfigMap")
        };
        push_map(&env, &publish(pinned.clone())).await;
        serving(&env, &fanout).await;
        env.create_job(
            "pulled",
            "fanout",
            json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]}),
        )
        .await;
        let job = env
            .wait_job("pulled", "Succeeded", |job| phase(job) == Some("Succeeded"))
            .await;
        assert_eq!(
            job.status.and_then(|s| s.policy).map(|p| p.digest),
            Some(Digest::of(&fanout).to_hex())
        );
        // A repository the grant does not name, and (on this strict host) a tag:
        // refused, the version pulled before keeps serving.
        let ungranted = reference(&format!(
            "{}/team-b/fanout@sha256:{}",
            registry.host(),
            pinned.digest().expect("pinned")
        ));
        let tagged = reference(&format!("{}/policies/fanout:v1", registry.host()));
        // Both a component and an artifact: which one is meant is unclear.
        let mut both = publish(pinned.clone());
        both.binary_data = Some(BTreeMap::from([(
            configmap::MODULE_KEY.to_owned(),
            ByteString(fanout.clone()),
        )]));
        let cases = [
            (publish(ungranted), "RegistryNotAllowed"),
            (publish(tagged), "Unpinned"),
            (both, "NoModule"),
        ];
        for (map, reason) in cases {
            let verdict = push_map(&env, &map).await;
            let error = verdict.error.unwrap_or_default();
            assert!(error.starts_with(reason), "{:?}: {error}", map.data);
            assert_eq!(
                verdict.loaded_digest.as_deref(),
                Some(Digest::of(&fanout).to_hex().as_str()),
                "still serving"
            );
        }
    }

    /// The Python and TypeScript `fanout` serve DataJobs to completion, one
    /// after the other under the same policy name: pulled from the registry
    /// (the only way for Python's 19 MB), and TypeScript's 2 MB also gzip'd
    /// in the policy ConfigMap itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn python_and_typescript_fanouts_pulled_or_embedded_run_datajobs_to_completion() {
        let registry = Registry::start().await;
        let env = operator_pulling_from(&registry, "polyglot", Trusted::default()).await;
        for (language, pulled) in [
            ("typescript", false),
            ("python", true),
            ("typescript", true),
        ] {
            let component = std::fs::read(crate::common::polyglot(language, "fanout"))
                .expect("read the component");
            let map = if pulled {
                let pinned = push_signed(&registry, "fanout", &component, None).await;
                configmap::build_artifact(
                    "fanout",
                    &env.policy_namespace,
                    pinned,
                    &component,
                    &for_every_namespace(),
                )
                .expect("a policy ConfigMap")
            } else {
                let map = policy_map(&env, "fanout", &component, &for_every_namespace());
                let embedded = map.binary_data.as_ref().expect("binary data");
                assert!(embedded.contains_key(configmap::MODULE_GZ_KEY));
                map
            };
            push_map(&env, &map).await;
            serving(&env, &component).await;
            let name = format!("{language}-{}", if pulled { "pulled" } else { "embedded" });
            env.create_job(
                &name,
                "fanout",
                json!({"replicas": 2, "image": "busybox:1.36", "command": ["true"]}),
            )
            .await;
            let job = env
                .wait_job(&name, "Succeeded", |job| phase(job) == Some("Succeeded"))
                .await;
            let status = job.status.expect("a status");
            assert_eq!(
                status.policy.map(|p| p.digest),
                Some(Digest::of(&component).to_hex()),
                "{language}"
            );
            let succeeded = status
                .outputs
                .as_ref()
                .and_then(|o| o.get("succeeded"))
                .cloned();
            assert_eq!(
                succeeded,
                Some(json!(2)),
                "{language}: {:?}",
                status.outputs
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_host_given_keys_serves_only_signed_artifacts_and_keeps_the_last_good_one() {
        let registry = Registry::start().await;
        let platform = signing_key();
        let fanout = guest_bytes("fanout");
        let signed = push_signed(&registry, "fanout", &fanout, Some(&platform)).await;
        let unsigned = push_signed(&registry, "fanout", &guest_bytes("fanout-next"), None).await;
        let env = operator_pulling_from(
            &registry,
            "signed-operator",
            trusting("platform", &platform),
        )
        .await;
        // A component in the ConfigMap cannot be signed: refused.
        let embedded = crate::common::publishing::push(&env, "fanout", &fanout).await;
        assert!(
            embedded
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("Unsigned")),
            "{embedded:?}"
        );
        let publish = |artifact: &Reference, component: &[u8]| {
            configmap::build_artifact(
                "fanout",
                &env.policy_namespace,
                artifact.clone(),
                component,
                &for_every_namespace(),
            )
            .expect("a policy ConfigMap")
        };
        push_map(&env, &publish(&signed, &fanout)).await;
        serving(&env, &fanout).await;
        let serving = Digest::of(&fanout).to_hex();
        let verdict = push_map(&env, &publish(&unsigned, &guest_bytes("fanout-next"))).await;
        assert!(
            verdict
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("Unsigned")),
            "{verdict:?}"
        );
        assert_eq!(
            verdict.loaded_digest.as_deref(),
            Some(serving.as_str()),
            "the signed version keeps serving"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registry_down_is_tried_again_with_backoff_while_the_last_good_version_serves() {
        let next = guest_bytes("fanout-next");
        let hostile = HostileRegistry::start(next.clone());
        hostile.lie(Lie::Unavailable);
        let env = Env::start_with(OperatorSetup {
            registries: Registries {
                extra_roots: vec![hostile.ca()],
                cache_dir: Some(cache_dir("retried")),
                pull_timeout: Duration::from_secs(30),
                trusted: Trusted::default(),
                signed_namespaces: None,
            },
            ..OperatorSetup::configmaps()
        })
        .await;
        apply_grant(
            &env,
            "fanout",
            BTreeMap::from([("registries".to_owned(), hostile.host())]),
        )
        .await;
        let fanout = guest_bytes("fanout");
        crate::common::publishing::push(&env, "fanout", &fanout).await;
        serving(&env, &fanout).await;
        let artifact = configmap::build_artifact(
            "fanout",
            &env.policy_namespace,
            reference(&hostile.reference()),
            &next,
            &for_every_namespace(),
        )
        .expect("a policy ConfigMap");
        let verdict = push_map(&env, &artifact).await;
        let error = verdict.error.unwrap_or_default();
        assert!(error.starts_with("PullFailed"), "{error}");
        assert!(error.contains("503"), "{error}");
        assert_eq!(
            verdict.loaded_digest.as_deref(),
            Some(Digest::of(&fanout).to_hex().as_str()),
            "the last good version serves"
        );
        // Tried again on its own, with backoff: more than once while down.
        let asked = hostile.requests();
        eventually("the pull tried again", || {
            let more = hostile.requests() > asked + 1;
            async move { more.then_some(()) }
        })
        .await;
        // Back up: the same ConfigMap loads, untouched.
        hostile.lie(Lie::None);
        serving(&env, &next).await;
    }

    /// A team whose registry accepts connections and never answers holds up
    /// no other team: with six of its artifacts stalled, another team's new
    /// version in a ConfigMap serves within its own load, and after a
    /// restart in the same state that team's DataJobs reconcile at once,
    /// the stalled pulls still waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registry_that_never_answers_holds_up_no_other_teams_versions_or_datajobs() {
        let next = guest_bytes("fanout-next");
        let hostile = HostileRegistry::start(next.clone());
        hostile.lie(Lie::Stall);
        let setup = || OperatorSetup {
            registries: Registries {
                extra_roots: vec![hostile.ca()],
                cache_dir: None,
                // Longer than the test: no stalled pull ends by itself.
                pull_timeout: Duration::from_secs(600),
                trusted: Trusted::default(),
                signed_namespaces: None,
            },
            teams: policyhost::fair::Teams::parse(["slow=slow-*"]).expect("the rule"),
            ..OperatorSetup::configmaps()
        };
        let mut env = Env::start_with(setup()).await;
        for i in 0..6 {
            let name = format!("slow-{i}");
            apply_grant(
                &env,
                &name,
                BTreeMap::from([("registries".to_owned(), hostile.host())]),
            )
            .await;
            let map = configmap::build_artifact(
                &name,
                &env.policy_namespace,
                reference(&hostile.reference()),
                &next,
                &for_every_namespace(),
            )
            .expect("a policy ConfigMap");
            policyhost::publisher::publish::apply(&env.client, &map)
                .await
                .expect("publish it");
        }
        eventually("the stalled pulls", || {
            let asked = hostile.requests();
            async move { (asked >= 2).then_some(()) }
        })
        .await;
        // Its own load is well under a second; the stalled pulls would hold
        // a load for ten minutes each.
        let patience = Duration::from_secs(30);
        let fanout = guest_bytes("fanout");
        let published = Instant::now();
        let map =
            crate::common::publishing::policy_map(&env, "fanout", &fanout, &for_every_namespace());
        policyhost::publisher::publish::apply(&env.client, &map)
            .await
            .expect("publish fanout");
        let registry = Arc::clone(&env.operator().shared.registry);
        eventually_within("fanout in service", patience, || {
            let serving = registry.get("fanout").is_ok();
            async move { serving.then_some(()) }
        })
        .await;
        eprintln!(
            "another team's version served after {:?}",
            published.elapsed()
        );
        let params = json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]});
        env.create_job("before", "fanout", params.clone()).await;
        env.wait_job("before", "Succeeded", |job| phase(job) == Some("Succeeded"))
            .await;

        env.stop_operator().await;
        let restarted = Instant::now();
        env.start_operator(setup()).await;
        env.create_job("after", "fanout", params).await;
        let jobs = env.jobs();
        eventually_within("a DataJob after the restart Succeeded", patience, || {
            let jobs = jobs.clone();
            async move {
                let job = jobs.get_opt("after").await.ok()??;
                (phase(&job) == Some("Succeeded")).then_some(())
            }
        })
        .await;
        eprintln!(
            "a DataJob after the restart succeeded {:?} after it",
            restarted.elapsed()
        );
        assert!(
            env.operator().shared.registry.get("slow-0").is_err(),
            "the stalled team's policies are still pulling"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signatures_required_for_some_namespaces_refuse_only_versions_that_may_serve_them() {
        let platform = signing_key();
        let env = Env::start_with(OperatorSetup {
            registries: Registries {
                trusted: trusting("platform", &platform),
                signed_namespaces: Some(vec!["payments".to_owned()]),
                ..Registries::default()
            },
            ..OperatorSetup::configmaps()
        })
        .await;
        let fanout = guest_bytes("fanout");
        for (serves, refused) in [("analytics", false), ("payments", true), ("*", true)] {
            let settings = configmap::Settings {
                namespaces: Some(
                    policyhost::policies::access::Access::parse(serves).expect("namespaces"),
                ),
                ..configmap::Settings::default()
            };
            let map = crate::common::publishing::policy_map(&env, "fanout", &fanout, &settings);
            let verdict = push_map(&env, &map).await;
            let unsigned = verdict
                .error
                .as_deref()
                .is_some_and(|error| error.starts_with("Unsigned"));
            assert_eq!(unsigned, refused, "serving {serves}: {verdict:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_single_team_host_a_tag_is_resolved_once_and_pinned_across_a_restart() {
        let registry = Registry::start().await;
        let (fanout, next) = (guest_bytes("fanout"), guest_bytes("fanout-next"));
        let first = push_signed(&registry, "fanout", &fanout, None).await;
        let setup = || OperatorSetup {
            policy_tenancy: policyhost::policies::tenancy::Tenancy::SingleTeam,
            ..pulling_from(&registry, "pinned", Trusted::default())
        };
        let mut env = Env::start_with(setup()).await;
        grant_registry(&env, &registry).await;
        let tag = format!("{}/policies/fanout:v1", registry.host());
        let mut map = configmap::build_artifact(
            "fanout",
            &env.policy_namespace,
            reference(&tag),
            &fanout,
            &configmap::Settings::default(),
        )
        .expect("a policy ConfigMap");
        // No `sha256` pin: what the tag names is what serves.
        map.data
            .get_or_insert_default()
            .remove(configmap::keys::SHA256);
        push_map(&env, &map).await;
        serving(&env, &fanout).await;
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        let pinned = api
            .get("policy-fanout")
            .await
            .expect("policy-fanout")
            .annotations()[PINNED_ANNOTATION]
            .clone();
        assert_eq!(
            pinned,
            format!("{tag}@sha256:{}", first.digest().expect("pinned")),
            "the tag and the digest it named"
        );
        // The tag moves; the operator restarts and loads the ConfigMap again.
        push_signed(&registry, "fanout", &next, None).await;
        env.stop_operator().await;
        env.start_operator(setup()).await;
        let registry_of = Arc::clone(&env.operator().shared.registry);
        let serving_now = eventually("fanout in service after the restart", || {
            let policy = registry_of.get("fanout").ok();
            async move { policy }
        })
        .await;
        assert_eq!(
            serving_now.digest().to_hex(),
            Digest::of(&fanout).to_hex(),
            "the digest the tag named first, not where it moved"
        );
    }

    /// A rollback to a version pulled before needs no registry: its
    /// revision names the artifact by digest, and the artifact cache has it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rollback_to_a_pulled_version_serves_it_from_the_artifact_cache_with_the_registry_down()
     {
        let registry = Registry::start().await;
        let (fanout, next) = (guest_bytes("fanout"), guest_bytes("fanout-next"));
        let env = operator_pulling_from(&registry, "rollback", Trusted::default()).await;
        for component in [&fanout, &next] {
            let artifact = push_signed(&registry, "fanout", component, None).await;
            let map = configmap::build_artifact(
                "fanout",
                &env.policy_namespace,
                artifact,
                component,
                &for_every_namespace(),
            )
            .expect("a policy ConfigMap");
            push_map(&env, &map).await;
            serving(&env, component).await;
        }
        drop(registry);
        let kubeconfig = env.kubeconfig_file();
        let rolled = policyhost(&[
            "policy",
            "rollback",
            "fanout",
            "--wait",
            "--namespace",
            &env.policy_namespace,
            "--kubeconfig",
            kubeconfig.to_str().expect("a UTF-8 path"),
        ]);
        let fanout_digest = Digest::of(&fanout).to_hex();
        assert!(
            text(&rolled).contains(&format!("serving sha256:{fanout_digest}")),
            "{}",
            text(&rolled)
        );
        let event = crate::common::publishing::wait_event(
            &env,
            "policy-fanout",
            "PolicyLoaded",
            "served again from its revision",
        )
        .await;
        let note = event.message.unwrap_or_default();
        assert!(
            note.contains(&format!("sha256:{fanout_digest} in service")),
            "{note}"
        );
        assert!(note.contains("from the artifact cache"), "{note}");
        assert!(note.contains("compile cache hit"), "{note}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pushes_and_signs_an_artifact_and_checks_tests_and_runs_a_reference() {
    let registry = Registry::start().await;
    let env = Env::cluster_only().await;
    let dir = cache_dir("cli");
    std::fs::create_dir_all(&dir).expect("a directory");
    let (auth, ca, key) = (
        dir.join("config.json"),
        dir.join("ca.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(
        &auth,
        docker_config(&registry.host(), USER, registry.password()),
    )
    .expect("write config.json");
    std::fs::write(&ca, registry.ca_pem()).expect("write the CA");
    // The key as cosign's encrypted key file, its password in COSIGN_PASSWORD.
    let signer = signing_key();
    let file = signer.encrypted_pem(b"push-password").expect("a key file");
    std::fs::write(&key, file).expect("write the key");
    let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_owned();
    let kubeconfig = env.kubeconfig_file();
    let tagged = format!("{}/policies/fanout:1.0.0", registry.host());
    let registry_args = [
        "--registry-auth".to_owned(),
        path(&auth),
        "--registry-ca".to_owned(),
        path(&ca),
    ];
    let fanout_wasm = crate::common::guest("fanout");
    let mut push = vec![
        "policy".to_owned(),
        "push".to_owned(),
        path(&fanout_wasm),
        "--name".to_owned(),
        "fanout".to_owned(),
        "--allowed-namespaces".to_owned(),
        "*".to_owned(),
        "--kubeconfig".to_owned(),
        path(&kubeconfig),
        "--namespace".to_owned(),
        env.policy_namespace.clone(),
        "--oci".to_owned(),
        tagged.clone(),
        "--sign-key".to_owned(),
        path(&key),
    ];
    push.extend(registry_args.iter().cloned());
    let push: Vec<&str> = push.iter().map(String::as_str).collect();
    let unopened = policyhost(&push);
    assert!(!unopened.status.success());
    assert!(
        text(&unopened).contains("COSIGN_PASSWORD") && !text(&unopened).contains("pushed"),
        "the key opens before anything is pushed: {}",
        text(&unopened)
    );
    let pushed = policyhost_with_env(&push, &[("COSIGN_PASSWORD", "push-password")]);
    assert!(pushed.status.success(), "{}", text(&pushed));
    // The ConfigMap names the artifact by its digest, the tag dropped.
    let map = Api::<ConfigMap>::namespaced(env.client.clone(), &env.policy_namespace)
        .get("policy-fanout")
        .await
        .expect("policy-fanout");
    assert!(map.binary_data.is_none(), "no bytes: {:?}", map.data);
    let data = map.data.unwrap_or_default();
    let pinned = reference(&data["artifact"]);
    assert!(pinned.is_pinned() && pinned.tag().is_none(), "{pinned}");
    assert_eq!(data["sha256"], Digest::of(&guest_bytes("fanout")).to_hex());
    assert!(
        text(&pushed).contains(&format!("pushed {tagged} as {pinned}")),
        "{}",
        text(&pushed)
    );
    // Signed with the key: a host trusting its public key pulls it.
    let login = credentials(&registry.host(), USER, registry.password());
    let puller = Puller::new(
        client(registry.ca()),
        BlobCache::default(),
        Duration::from_secs(30),
    )
    .trusting(trusting("team", &signer));
    puller
        .pull(
            &pinned,
            &grant(&format!("{}/policies/", registry.host()), login),
            64 << 20,
        )
        .await
        .expect("signed by the key --sign-key named");
    // check and test take the reference as they take a file.
    let mut check = vec!["policy".to_owned(), "check".to_owned(), pinned.to_string()];
    check.extend(registry_args.iter().cloned());
    let checked = policyhost(&check.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(checked.status.success(), "{}", text(&checked));
    assert!(
        text(&checked).contains("ok: loadable"),
        "{}",
        text(&checked)
    );
    let golden = crate::common::workspace().join("policies/fanout/tests/golden");
    let mut test = vec![
        "policy".to_owned(),
        "test".to_owned(),
        pinned.to_string(),
        path(&golden),
    ];
    test.extend(registry_args.iter().cloned());
    let tested = policyhost(&test.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(tested.status.success(), "{}", text(&tested));
    let job = crate::common::workspace().join("docs/examples/datajob.yaml");
    let mut run = vec![
        "policy".to_owned(),
        "run".to_owned(),
        pinned.to_string(),
        "--job".to_owned(),
        path(&job),
    ];
    run.extend(registry_args.iter().cloned());
    let ran = policyhost(&run.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ran.status.success(), "{}", text(&ran));
    let result: serde_json::Value =
        serde_json::from_slice(&ran.stdout).expect("the result as JSON");
    assert!(
        result["children"].as_array().is_some_and(|c| !c.is_empty()),
        "fanout's children: {result}"
    );
    // Without the credentials: refused, saying so.
    let anonymous = policyhost(&[
        "policy",
        "check",
        &pinned.to_string(),
        "--registry-auth",
        &path(&dir.join("missing.json")),
        "--registry-ca",
        &path(&ca),
    ]);
    assert!(!anonymous.status.success());
    assert!(
        text(&anonymous).contains("missing.json"),
        "{}",
        text(&anonymous)
    );
}
