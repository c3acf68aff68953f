//! Outbound grants from ConfigMaps: which ConfigMap grants which policy,
//! and the grant of a policy with its credentials read, for the load of
//! its next version.
//!
//! A grant ConfigMap (`grant-<policy>`, label `policyhost.dev/grant:
//! <policy>`, in the policy namespace; format in [`crate::grants`])
//! is the platform team's: the Role that lets a team push `policy-<policy>`
//! does not name it. Whatever the `--policy-tenancy`, only `grant-<policy>`
//! grants `<policy>`, so RBAC on ConfigMap names is RBAC on grants: a
//! team's own ConfigMap labelled as a grant grants nothing ([`Misnamed`]).
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

use super::grant_name;
use super::network::{self, GrantError};
use super::pull::{self, PullTerms, PullTermsError};
use crate::oci::credentials::CredentialsError;
use crate::oci::{Credentials, PullGrant};
use crate::outbound::{CredentialError, Grant, Outbound};
use crate::shard::Replicas;
use crate::vocabulary::GRANT_LABEL;

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
    /// ConfigMap name → what it grants (only `grant-<policy>` names).
    entries: Mutex<HashMap<String, Entry>>,
    /// ConfigMap name → why it grants nothing, as last reported.
    ignored: Mutex<HashMap<String, Misnamed>>,
    /// Policy → the Secret values its loaded version was given.
    credentials: Mutex<HashMap<String, Secrets>>,
    /// The replicas each grant's concurrency is divided among.
    replicas: Replicas,
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
    /// A credential's Secret or key is missing, or its value unusable.
    #[error("grant ConfigMap {configmap}: {source}")]
    Credential {
        /// The grant ConfigMap.
        configmap: String,
        /// What is wrong with it.
        source: CredentialError,
    },
    /// The registries half of the grant does not parse.
    #[error("grant ConfigMap {configmap}: {source}")]
    Pull {
        /// The grant ConfigMap.
        configmap: String,
        /// What is wrong with it.
        source: PullTermsError,
    },
    /// The pull secret is missing or not a `dockerconfigjson` one.
    #[error("grant ConfigMap {configmap}: pull secret `{secret}`: {source}")]
    PullSecret {
        /// The grant ConfigMap.
        configmap: String,
        /// The Secret.
        secret: String,
        /// What is wrong with it (never its value).
        source: PullSecretProblem,
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
            Self::Invalid { .. } | Self::Pull { .. } => "InvalidGrant",
            Self::Credential { .. } | Self::Unreadable { .. } | Self::PullSecret { .. } => {
                "GrantCredential"
            }
        }
    }
}

/// What is wrong with a grant's pull secret.
#[derive(Debug, thiserror::Error)]
pub enum PullSecretProblem {
    /// No such Secret.
    #[error("it does not exist")]
    Missing,
    /// Not the type Pods' pull secrets have.
    #[error("its type is {0}, not kubernetes.io/dockerconfigjson")]
    Type(String),
    /// No credentials in it.
    #[error("it has no `{}`", pull::SECRET_KEY)]
    NoKey,
    /// Its credentials do not parse.
    #[error(transparent)]
    Credentials(CredentialsError),
}

/// A ConfigMap labelled as the grant of a policy its name may not grant:
/// it grants nothing. Only `grant-<policy>` grants `<policy>`, a name no
/// team's Role names, so a team cannot grant itself the network by
/// labelling a ConfigMap it may write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "ConfigMap {configmap} is labelled as a grant of policy `{policy}`, which only the ConfigMap `grant-{policy}` may grant: it grants nothing"
)]
pub struct Misnamed {
    /// The ConfigMap.
    pub configmap: String,
    /// The policy its label names.
    pub policy: String,
}

impl Misnamed {
    /// A short UpperCamelCase name for Events, logs and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        "GrantIgnored"
    }
}

/// What taking in one grant ConfigMap changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The policies whose grant changed: their versions load again.
    pub changed: Vec<String>,
    /// Why the ConfigMap grants nothing, if its name may not grant the
    /// policy its label names; said once, not again for each update that
    /// leaves the label alone.
    pub ignored: Option<Misnamed>,
}

impl Grants {
    /// The grants of `namespace`; nothing is known until [`Grants::apply`].
    #[must_use]
    pub fn new(client: Client, namespace: String) -> Self {
        Self {
            client,
            namespace,
            entries: Mutex::new(HashMap::new()),
            ignored: Mutex::new(HashMap::new()),
            credentials: Mutex::new(HashMap::new()),
            replicas: Replicas::default(),
        }
    }

    /// The same, each grant's outbound concurrency divided among `replicas`.
    #[must_use]
    pub fn shared_among(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in a grant ConfigMap as the watch saw it (`None`: deleted):
    /// the policies whose grant changed, and whether it was ignored for its
    /// name (then it grants nothing, as if deleted).
    pub fn apply(&self, name: &str, map: Option<&ConfigMap>) -> Applied {
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
        let ignored = new
            .as_ref()
            .filter(|entry| name != grant_name(&entry.policy))
            .map(|entry| Misnamed {
                configmap: name.to_owned(),
                policy: entry.policy.clone(),
            });
        let new = new.filter(|_| ignored.is_none());
        let changed = self.replace(name, new);
        let mut reported = self.ignored.lock().unwrap_or_else(PoisonError::into_inner);
        let ignored = match ignored {
            Some(misnamed) => (reported.insert(name.to_owned(), misnamed.clone()).as_ref()
                != Some(&misnamed))
            .then_some(misnamed),
            None => {
                reported.remove(name);
                None
            }
        };
        Applied { changed, ignored }
    }

    /// Puts `new` in place of what `name` granted; returns the policies
    /// whose grant changed.
    fn replace(&self, name: &str, new: Option<Entry>) -> Vec<String> {
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

    /// The ConfigMap that grants `policy`, `grant-<policy>`, with its
    /// `data`, if it exists.
    fn granting(&self, policy: &str) -> Option<(String, BTreeMap<String, String>)> {
        let name = grant_name(policy);
        let data = self
            .entries()
            .get(&name)
            .filter(|entry| entry.policy == policy)
            .map(|entry| entry.data.clone())?;
        Some((name, data))
    }

    /// The grant of `policy` with its credentials read: its network half
    /// (none when no ConfigMap grants it, or the grant is of registries
    /// alone) and its registries half (nothing by default).
    ///
    /// # Errors
    ///
    /// [`Refused`]: the version is rejected, the one in service keeps serving.
    pub async fn resolve(
        &self,
        policy: &str,
    ) -> Result<(Option<Arc<Outbound>>, Arc<PullGrant>), Refused> {
        let Some((configmap, data)) = self.granting(policy) else {
            self.credentials().remove(policy);
            return Ok((None, Arc::default()));
        };
        let pull = self.pull_grant(&configmap, &data).await?;
        if !network::grants_network(&data) {
            self.credentials().remove(policy);
            return Ok((None, Arc::new(pull)));
        }
        let grant = network::parse(&data).map_err(|source| Refused::Invalid {
            configmap: configmap.clone(),
            source,
        })?;
        let secrets = self.read_secrets(&configmap, &grant).await?;
        let outbound = Outbound::new(grant, &secrets)
            .map_err(|source| Refused::Credential { configmap, source })?
            .shared_among(self.replicas.clone());
        let mut credentials = self.credentials();
        if secrets.is_empty() {
            credentials.remove(policy);
        } else {
            credentials.insert(policy.to_owned(), secrets);
        }
        Ok((Some(Arc::new(outbound)), Arc::new(pull)))
    }

    /// The registries half of a grant, its pull secret read.
    async fn pull_grant(
        &self,
        configmap: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<PullGrant, Refused> {
        let terms = PullTerms::parse(data).map_err(|source| Refused::Pull {
            configmap: configmap.to_owned(),
            source,
        })?;
        let credentials = match &terms.secret {
            None => Credentials::anonymous(),
            Some(name) => self.pull_secret(configmap, name).await?,
        };
        Ok(PullGrant {
            prefixes: terms.prefixes,
            credentials,
        })
    }

    /// The credentials of the pull secret `name`.
    async fn pull_secret(&self, configmap: &str, name: &str) -> Result<Credentials, Refused> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|source| Refused::Unreadable {
                configmap: configmap.to_owned(),
                secret: name.to_owned(),
                source,
            })?;
        let problem = |problem| Refused::PullSecret {
            configmap: configmap.to_owned(),
            secret: name.to_owned(),
            source: problem,
        };
        let secret = secret.ok_or_else(|| problem(PullSecretProblem::Missing))?;
        let type_ = secret.type_.as_deref().unwrap_or("Opaque");
        if type_ != pull::SECRET_TYPE {
            return Err(problem(PullSecretProblem::Type(type_.to_owned())));
        }
        let value = secret
            .data
            .as_ref()
            .and_then(|data| data.get(pull::SECRET_KEY))
            .ok_or_else(|| problem(PullSecretProblem::NoKey))?;
        Credentials::parse(&value.0).map_err(|error| problem(PullSecretProblem::Credentials(error)))
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
            let Some((configmap, data)) = self.granting(&policy) else {
                continue;
            };
            if !network::grants_network(&data) {
                continue;
            }
            let Ok(grant) = network::parse(&data) else {
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

    fn grants() -> Grants {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Grants::new(client, "policyhost-system".into())
    }

    fn changed(applied: Applied) -> Vec<String> {
        assert_eq!(applied.ignored, None);
        applied.changed
    }

    #[tokio::test]
    async fn a_grant_change_names_the_policies_it_touches_and_nothing_else() {
        let grants = grants();
        assert_eq!(
            changed(grants.apply("grant-a", Some(&map("a", "https://x.example.com")))),
            ["a"]
        );
        assert!(
            changed(grants.apply("grant-a", Some(&map("a", "https://x.example.com")))).is_empty()
        );
        assert_eq!(
            changed(grants.apply("grant-b", Some(&map("b", "https://x.example.com")))),
            ["b"]
        );
        assert_eq!(changed(grants.apply("grant-a", None)), ["a"]);
        assert!(grants.resolve("a").await.unwrap().0.is_none());
        assert!(grants.resolve("b").await.unwrap().0.is_some());
    }

    #[tokio::test]
    async fn only_grant_policy_grants_policy_and_any_other_name_is_ignored_with_its_reason() {
        let grants = grants();
        // A team's own ConfigMap, labelled as a grant of its policy.
        let applied = grants.apply("policy-a", Some(&map("a", "https://x.example.com")));
        let ignored = applied.ignored.expect("ignored");
        assert_eq!(ignored.reason(), "GrantIgnored");
        assert_eq!(
            ignored.to_string(),
            "ConfigMap policy-a is labelled as a grant of policy `a`, which only the ConfigMap `grant-a` may grant: it grants nothing"
        );
        assert!(
            applied.changed.is_empty(),
            "nothing granted, nothing to load"
        );
        assert!(grants.resolve("a").await.unwrap().0.is_none());
        assert!(grants.names().is_empty(), "not kept");
        assert_eq!(
            grants.apply("policy-a", Some(&map("a", "https://y.example.com"))),
            Applied::default(),
            "said once"
        );

        grants.apply("grant-a", Some(&map("a", "https://x.example.com/path")));
        let error = grants.resolve("a").await.unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("grant ConfigMap grant-a: `data.origins`"),
            "{error}"
        );

        // `grant-a` relabelled to grant `b`: ignored, and `a` loses its grant.
        let applied = grants.apply("grant-a", Some(&map("b", "https://x.example.com")));
        assert_eq!(applied.changed, ["a"]);
        assert_eq!(
            applied.ignored.map(|m| m.policy).as_deref(),
            Some("b"),
            "grant-a may not grant b"
        );
        assert!(grants.resolve("a").await.unwrap().0.is_none());
        assert!(grants.resolve("b").await.unwrap().0.is_none());
    }

    #[tokio::test]
    async fn a_grant_of_registries_alone_grants_no_network_and_a_network_key_needs_origins() {
        let grants = grants();
        let mut registries = map("a", "");
        registries.data = Some(
            [(
                "registries".to_owned(),
                "registry.example.com/team-a/".to_owned(),
            )]
            .into(),
        );
        grants.apply("grant-a", Some(&registries));
        let (outbound, pull) = grants.resolve("a").await.unwrap();
        assert!(outbound.is_none(), "no network");
        let fanout = "registry.example.com/team-a/fanout:1".parse().unwrap();
        assert!(pull.allows(&fanout));
        let other = "registry.example.com/team-b/fanout:1".parse().unwrap();
        assert!(!pull.allows(&other), "another team's repository");
        // Without a grant, nothing may be pulled.
        assert!(!grants.resolve("b").await.unwrap().1.allows(&fanout));

        registries
            .data
            .get_or_insert_default()
            .insert("requestsPerCall".to_owned(), "2".to_owned());
        grants.apply("grant-a", Some(&registries));
        let error = grants.resolve("a").await.unwrap_err();
        assert_eq!(error.reason(), "InvalidGrant");
        assert!(
            error.to_string().contains("`data.origins` is required"),
            "{error}"
        );
    }
}
