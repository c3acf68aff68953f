//! Whether the API server filters by shard selector: a server without the
//! `ShardedListAndWatch` gate (or older than 1.36) ignores the parameter
//! and sends everything.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;

use super::Share;

/// Lists one Lease of `namespace` with a selector of every bucket and says
/// whether the answer carries `metadata.shardInfo`, the sign the server
/// applied it. A built-in kind, because kube-apiserver 1.37 sets
/// `shardInfo` on no custom resource list (their lists are unstructured),
/// though it filters them; the gate is the server's, so what holds for
/// Leases holds for DataJobs.
///
/// # Errors
///
/// The list failed.
pub async fn server_filters(client: &Client, namespace: &str) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let selector = Share::ALL.selector().unwrap_or_default();
    let url = format!(
        "{}?limit=1&shardSelector={}",
        api.resource_url(),
        form_urlencoded::byte_serialize(selector.as_bytes()).collect::<String>()
    );
    let request = http::Request::get(url)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let list: serde_json::Value = client.request(request).await?;
    Ok(list["metadata"]["shardInfo"]["selector"].is_string())
}

#[cfg(test)]
mod tests {
    use devcluster::{Config, DevCluster, Features};

    use super::*;

    async fn filters(gate: bool) -> bool {
        let cluster = DevCluster::start(Config {
            features: Features {
                sharded_list_and_watch: gate,
            },
            ..Config::default()
        })
        .await
        .expect("devcluster");
        let client = cluster.client().expect("client");
        server_filters(&client, "default").await.expect("a list")
    }

    #[tokio::test]
    async fn a_server_with_the_gate_says_so_and_one_without_does_not() {
        assert!(filters(true).await);
        assert!(!filters(false).await);
    }
}
