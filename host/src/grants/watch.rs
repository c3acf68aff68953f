//! The watch on grant ConfigMaps (label `policyhost.dev/grant`) and the
//! poll of the Secrets they name: both feed [`Grants`] and say which
//! policies must load again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Grants;
use crate::apply::events;
use crate::chain::Chain;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::vocabulary::GRANT_LABEL;

/// What the grant watch reports with, and to whom.
pub struct GrantWatch {
    /// The API client.
    pub client: Client,
    /// The policy namespace.
    pub namespace: String,
    /// The grants it keeps up to date.
    pub grants: Arc<Grants>,
    /// The load-error metric counts an ignored grant.
    pub metrics: Arc<Metrics>,
    /// The operator instance, reported in its Events.
    pub instance: String,
    /// Only the leader writes Events.
    pub leadership: Leadership,
}

impl GrantWatch {
    /// Feeds the grant ConfigMaps into [`Grants`] and calls `reload` for
    /// each policy whose grant changed; says so on `listed` after the first
    /// list, so that no policy version loads without the grant it has.
    pub async fn watch(&self, listed: oneshot::Sender<()>, reload: impl Fn(&str)) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let events =
            watcher::watcher(api, watcher::Config::default().labels(GRANT_LABEL)).default_backoff();
        futures::pin_mut!(events);
        let mut listed = Some(listed);
        // The names seen during a re-list: the others are gone.
        let mut seen: Option<HashSet<String>> = None;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    warn!(namespace = %self.namespace, error = %Chain(&error), "grant ConfigMap watch failed; retrying");
                    continue;
                }
            };
            let name = |map: &ConfigMap| map.metadata.name.clone().unwrap_or_default();
            let changed = match event {
                watcher::Event::Apply(map) => self.applied(&map).await,
                watcher::Event::Delete(map) => self.grants.apply(&name(&map), None).changed,
                watcher::Event::Init => {
                    seen = Some(HashSet::new());
                    Vec::new()
                }
                watcher::Event::InitApply(map) => {
                    seen.get_or_insert_default().insert(name(&map));
                    self.applied(&map).await
                }
                watcher::Event::InitDone => {
                    let seen = seen.take().unwrap_or_default();
                    let gone = self
                        .grants
                        .names()
                        .into_iter()
                        .filter(|n| !seen.contains(n));
                    let changed = gone
                        .flat_map(|n| self.grants.apply(&n, None).changed)
                        .collect();
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                    changed
                }
            };
            for policy in changed {
                reload(&policy);
            }
        }
    }

    /// Reads the Secrets that grants name `every` so long, and calls
    /// `reload` for each policy whose credentials changed (or can no longer
    /// be read: the new load is then refused, naming the Secret, and the
    /// version in service keeps its credentials). A poll, not a watch: the
    /// operator's Role may `get` those Secrets by name, and nothing more.
    pub async fn refresh_secrets(&self, every: Duration, reload: impl Fn(&str)) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            for policy in self.grants.rotated().await {
                info!(%policy, "a Secret its grant names changed");
                reload(&policy);
            }
        }
    }

    /// Takes in a grant ConfigMap; one whose name may not grant the policy
    /// it names is reported (a warning, the load-error metric, and a
    /// `GrantIgnored` Event from the leader) and grants nothing. Returns
    /// the policies whose grant changed.
    async fn applied(&self, map: &ConfigMap) -> Vec<String> {
        let name = map.metadata.name.clone().unwrap_or_default();
        let applied = self.grants.apply(&name, Some(map));
        if let Some(misnamed) = &applied.ignored {
            let reason = misnamed.reason();
            self.metrics.policy_rejected(&misnamed.policy, reason);
            warn!(
                policy = %misnamed.policy,
                configmap = %name,
                reason,
                why = %misnamed,
                "grant ConfigMap ignored"
            );
            if self.leadership.permits_writes() {
                let meta = &map.metadata;
                let regarding = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    name: meta.name.clone(),
                    namespace: meta.namespace.clone(),
                    uid: meta.uid.clone(),
                    ..ObjectReference::default()
                };
                let note = misnamed.to_string();
                events::record_on_policy(
                    &self.client,
                    &self.instance,
                    regarding,
                    true,
                    reason,
                    &note,
                )
                .await;
            }
        }
        applied.changed
    }
}
