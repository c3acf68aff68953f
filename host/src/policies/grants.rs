//! Outbound grants from ConfigMaps: which ConfigMap grants which policy,
//! and the grant of a policy with its credentials read, for the load of
//! its next version.
//!
//! A grant ConfigMap (`grant-<policy>`, label `policyhost.dev/grant:
//! <policy>`, in the policy namespace; format in [`crate::outbound::grant`])
//! is the platform team's: the Role that lets a team push `policy-<policy>`
//! does not name it. With `--strict-policy-tenancy` only `grant-<policy>`
//! may grant `<policy>`, so RBAC on ConfigMap names is RBAC on grants; two
//! ConfigMaps granting one policy are refused either way.
//!
//! The credentials' Secrets are read (`get`, one by one: the operator's
//! Role may name exactly them) when a version is loaded. A change of a
//! grant re-loads its policy; a Secret's new value is read at the next
//! load: after rotating it, change the grant (its `description` will do).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;

use crate::outbound::grant::GRANT_LABEL;
use crate::outbound::{CredentialError, Grant, GrantError, Outbound};

/// The ConfigMap name that grants `policy` on a strict host.
#[must_use]
pub fn grant_name(policy: &str) -> String {
    format!("grant-{policy}")
}

/// One grant ConfigMap as the host keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    policy: String,
    data: BTreeMap<String, String>,
}

/// The grant ConfigMaps of the policy namespace.
pub struct Grants {
    client: Client,
    namespace: String,
    strict: bool,
    /// ConfigMap name → what it grants.
    entries: Mutex<HashMap<String, Entry>>,
    /// Policy → the Secret values its loaded version was given.
    credentials: Mutex<HashMap<String, Secrets>>,
}

/// The values of the Secret keys a grant's credentials name, by
/// `(secret, key)`.
type Secrets = BTreeMap<(String, String), Vec<u8>>;

/// Why a policy's grant cannot serve its next version.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The grant does not parse.
    #[error("grant ConfigMap {configmap}: {source}")]
    Invalid {
        /// The grant ConfigMap.
        configmap: String,
        /// What is wrong with it.
        source: GrantError,
    },
    /// Two ConfigMaps grant the policy.
    #[error("ConfigMaps {first} and {second} both grant policy `{policy}`; delete one of them")]
    Ambiguous {
        /// The policy.
        policy: String,
        /// One ConfigMap.
        first: String,
        /// The other.
        second: String,
    },
    /// A credential's Secret or key is missing, or its value unusable.
    #[error("grant ConfigMap {configmap}: {source}")]
    Credential {
        /// The grant ConfigMap.
        configmap: String,
        /// What is wrong with it.
        source: CredentialError,
    },
    /// The Secret could not be read (the operator's Role does not name it,
    /// or the API server failed).
    #[error(
        "grant ConfigMap {configmap}: cannot read Secret `{secret}` (the operator's Role must allow `get` on it by name)"
    )]
    Unreadable {
        /// The grant ConfigMap.
        configmap: String,
        /// The Secret.
        secret: String,
        /// What the API server said.
        source: kube::Error,
    },
}

impl Refused {
    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid { .. } | Self::Ambiguous { .. } => "InvalidGrant",
            Self::Credential { .. } | Self::Unreadable { .. } => "GrantCredential",
        }
    }
}

impl Grants {
    /// The grants of `namespace`; nothing is known until [`Grants::apply`].
    #[must_use]
    pub fn new(client: Client, namespace: String, strict: bool) -> Self {
        Self {
            client,
            namespace,
            strict,
            entries: Mutex::new(HashMap::new()),
            credentials: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in a grant ConfigMap as the watch saw it (`None`: deleted);
    /// returns the policies whose grant changed.
    pub fn apply(&self, name: &str, map: Option<&ConfigMap>) -> Vec<String> {
        let new = map.map(|map| Entry {
            policy: map
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(GRANT_LABEL))
                .cloned()
                .unwrap_or_default(),
            data: map.data.clone().unwrap_or_default(),
        });
        let old = match &new {
            Some(entry) => self.entries().insert(name.to_owned(), entry.clone()),
            None => self.entries().remove(name),
        };
        if old == new {
            return Vec::new();
        }
        let mut changed: Vec<String> = [old, new]
            .into_iter()
            .flatten()
            .map(|entry| entry.policy)
            .filter(|policy| !policy.is_empty())
            .collect();
        changed.dedup();
        changed
    }

    /// The names of the grant ConfigMaps known.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }

    /// The ConfigMaps that grant `policy`: on a strict host, only
    /// `grant-<policy>` counts.
    fn granting(&self, policy: &str) -> Vec<(String, BTreeMap<String, String>)> {
        let strict_name = grant_name(policy);
        let mut found: Vec<_> = self
            .entries()
            .iter()
            .filter(|(name, entry)| {
                entry.policy == policy && (!self.strict || **name == strict_name)
            })
            .map(|(name, entry)| (name.clone(), entry.data.clone()))
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// The grant of `policy` with its credentials read, or none when no
    /// ConfigMap grants it.
    ///
    /// # Errors
    ///
    /// [`Refused`]: the version is rejected, the one in service keeps serving.
    pub async fn resolve(&self, policy: &str) -> Result<Option<Arc<Outbound>>, Refused> {
        let mut granting = self.granting(policy).into_iter();
        let Some((configmap, data)) = granting.next() else {
            self.credentials().remove(policy);
            return Ok(None);
        };
        if let Some((second, _)) = granting.next() {
            return Err(Refused::Ambiguous {
                policy: policy.to_owned(),
                first: configmap,
                second,
            });
        }
        let grant = Grant::parse(&data).map_err(|source| Refused::Invalid {
            configmap: configmap.clone(),
            source,
        })?;
        let secrets = self.read_secrets(&configmap, &grant).await?;
        let outbound = Outbound::new(grant, &secrets)
            .map_err(|source| Refused::Credential { configmap, source })?;
        let mut credentials = self.credentials();
        if secrets.is_empty() {
            credentials.remove(policy);
        } else {
            credentials.insert(policy.to_owned(), secrets);
        }
        Ok(Some(Arc::new(outbound)))
    }

    /// The policies whose grant's Secrets now hold other values than the
    /// ones their loaded version was given, or can no longer be read.
    pub async fn rotated(&self) -> Vec<String> {
        let loaded: Vec<(String, Secrets)> = self
            .credentials()
            .iter()
            .map(|(policy, secrets)| (policy.clone(), secrets.clone()))
            .collect();
        let mut rotated = Vec::new();
        for (policy, secrets) in loaded {
            let Some((configmap, data)) = self.granting(&policy).into_iter().next() else {
                continue;
            };
            let Ok(grant) = Grant::parse(&data) else {
                continue;
            };
            let now = self.read_secrets(&configmap, &grant).await;
            if now.as_ref().ok() != Some(&secrets) {
                rotated.push(policy);
            }
        }
        rotated
    }

    fn credentials(&self) -> MutexGuard<'_, HashMap<String, Secrets>> {
        self.credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The values of every key the grant's credentials name.
    async fn read_secrets(&self, configmap: &str, grant: &Grant) -> Result<Secrets, Refused> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut values = BTreeMap::new();
        for name in grant.secrets() {
            let secret = match api.get_opt(name).await {
                Ok(secret) => secret,
                Err(source) => {
                    return Err(Refused::Unreadable {
                        configmap: configmap.to_owned(),
                        secret: name.to_owned(),
                        source,
                    });
                }
            };
            for (key, value) in secret.and_then(|s| s.data).unwrap_or_default() {
                values.insert((name.to_owned(), key), value.0);
            }
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn map(policy: &str, origins: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                labels: Some([(GRANT_LABEL.to_owned(), policy.to_owned())].into()),
                ..ObjectMeta::default()
            },
            data: Some([("origins".to_owned(), origins.to_owned())].into()),
            ..ConfigMap::default()
        }
    }

    fn grants(strict: bool) -> Grants {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Grants::new(client, "policyhost-system".into(), strict)
    }

    #[tokio::test]
    async fn a_grant_change_names_the_policies_it_touches_and_nothing_else() {
        let grants = grants(false);
        assert_eq!(
            grants.apply("grant-a", Some(&map("a", "https://x.example.com"))),
            ["a"]
        );
        assert!(
            grants
                .apply("grant-a", Some(&map("a", "https://x.example.com")))
                .is_empty()
        );
        assert_eq!(
            grants.apply("grant-a", Some(&map("b", "https://x.example.com"))),
            ["a", "b"]
        );
        assert_eq!(grants.apply("grant-a", None), ["b"]);
        assert!(grants.resolve("b").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_policy_has_one_grant_and_on_a_strict_host_only_grant_policy() {
        let loose = grants(false);
        loose.apply("other", Some(&map("a", "https://x.example.com")));
        let outbound = loose
            .resolve("a")
            .await
            .unwrap()
            .expect("granted by any name");
        assert_eq!(
            outbound.grant().origins[0].as_str(),
            "https://x.example.com"
        );
        loose.apply("grant-a", Some(&map("a", "https://y.example.com")));
        let error = loose.resolve("a").await.unwrap_err();
        assert_eq!(error.reason(), "InvalidGrant");
        assert!(
            error.to_string().contains("grant-a and other both grant"),
            "{error}"
        );

        let strict = grants(true);
        strict.apply("other", Some(&map("a", "https://x.example.com")));
        assert!(
            strict.resolve("a").await.unwrap().is_none(),
            "only grant-a counts"
        );
        strict.apply("grant-a", Some(&map("a", "https://x.example.com/path")));
        let error = strict.resolve("a").await.unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("grant ConfigMap grant-a: `data.origins`"),
            "{error}"
        );
    }
}
