//! Policies as OCI artifacts: pushed and pulled through the CNCF
//! distribution registry (on loopback with TLS and basic auth), refused
//! with the reason when a registry lies, and served by the operator from
//! a ConfigMap that names the artifact.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use policyhost::oci::{
    self, BlobCache, Client, ClientConfig, Credentials, PullError, PullGrant, Puller, Reference,
};
use policyhost::operator::Registries;
use policyhost::policies::configmap;
use policyhost::runtime::Digest;
use rustls::pki_types::CertificateDer;
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, phase};
use crate::common::hostile_registry::{self, HostileRegistry, Lie};
use crate::common::publishing::{apply_grant, push_map};
use crate::common::registry::{Registry, USER};
use crate::common::{for_every_namespace, guest_bytes, scratch};

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
    // A tag cannot be served from a cache: it may have moved.
    let error = restarted
        .pull(&tagged, &allowed, 64 << 20)
        .await
        .expect_err("the registry is down");
    assert_eq!(error.reason(), "PullFailed", "{error}");
    assert!(error.is_transient(), "{error}");
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
            Lie::RedirectTo(elsewhere),
            "RegistryNotAllowed",
            "127.0.0.2",
            2,
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
    let env = Env::start_with(OperatorSetup {
        registries: Registries {
            extra_roots: vec![registry.ca()],
            cache_dir: Some(cache_dir("operator")),
            pull_timeout: Duration::from_secs(30),
        },
        ..OperatorSetup::configmaps()
    })
    .await;
    pull_secret(&env, "team-a-pull", &registry).await;
    apply_grant(
        &env,
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
    let verdict = push_map(&env, &publish(pinned.clone())).await;
    assert_eq!(verdict.error, None, "{verdict:?}");
    assert_eq!(
        verdict.loaded_digest.as_deref(),
        Some(Digest::of(&fanout).to_hex().as_str())
    );
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
    for (artifact, reason) in [(ungranted, "RegistryNotAllowed"), (tagged, "Unpinned")] {
        let verdict = push_map(&env, &publish(artifact.clone())).await;
        let error = verdict.error.unwrap_or_default();
        assert!(error.starts_with(reason), "{artifact}: {error}");
        assert_eq!(
            verdict.loaded_digest.as_deref(),
            Some(Digest::of(&fanout).to_hex().as_str()),
            "still serving"
        );
    }
}
