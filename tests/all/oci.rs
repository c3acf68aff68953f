//! Policies as OCI artifacts: the registry the tests pull from is the CNCF
//! distribution registry, on loopback with TLS and basic auth.

use crate::common::registry::{Registry, USER};

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
