//! Fault injection for reliability tests: error rates, latency, cut watches and forced
//! 410 Gone, deterministic for a given seed and switchable at runtime.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::rand::Rng;
use crate::status::ApiError;
use crate::store::Store;

/// Which requests an error rule applies to, and what they get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRule {
    /// Only this verb (`list`, `watch`, `patch`, ...); all verbs when unset.
    #[serde(default)]
    pub verb: Option<String>,
    /// Only this resource (`pods`, `datajobs.policyhost.dev`); all when unset.
    #[serde(default)]
    pub resource: Option<String>,
    /// Probability in `[0, 1]` that a matching request fails.
    pub rate: f64,
    /// The status code: 500, 429 (with `Retry-After`) or 409.
    pub code: u16,
    /// `Retry-After` seconds for 429.
    #[serde(default)]
    pub retry_after_seconds: Option<u32>,
}

/// The fault configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Faults {
    /// Error rules, tried in order; the first that fires decides.
    #[serde(default)]
    pub errors: Vec<ErrorRule>,
    /// Latency added to every API request, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Cut every watch stream after this many seconds.
    #[serde(default)]
    pub watch_cut_seconds: Option<u64>,
    /// Clients cut off from the server, by identity (the bearer token they
    /// present): their requests get 503 and are neither served nor recorded,
    /// as if the network between them and the server were down.
    #[serde(default)]
    pub partitioned: Vec<String>,
}

/// Runtime control of faults, shared by the handle, the admin endpoint and the server.
#[derive(Debug)]
pub struct FaultControls {
    faults: RwLock<Faults>,
    rng: Rng,
    store: Arc<Store>,
    gone: watch::Sender<u64>,
}

fn matches_resource(rule: &Option<String>, group: &str, resource: &str) -> bool {
    match rule {
        None => true,
        Some(r) if group.is_empty() => r == resource,
        Some(r) => *r == format!("{resource}.{group}") || r == resource,
    }
}

impl FaultControls {
    pub(crate) fn new(faults: Faults, seed: u64, store: Arc<Store>) -> Self {
        Self {
            faults: RwLock::new(faults),
            rng: Rng::new(seed),
            store,
            gone: watch::channel(0).0,
        }
    }

    /// Replaces the fault configuration.
    pub fn set(&self, faults: Faults) {
        *self.faults.write().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    /// The current fault configuration.
    pub fn get(&self) -> Faults {
        self.faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Turns every fault off.
    pub fn clear(&self) {
        self.set(Faults::default());
    }

    /// Restarts the random sequence that decides which requests fail.
    pub fn reseed(&self, seed: u64) {
        self.rng.reseed(seed);
    }

    /// Forgets all watch history and ends every open watch: clients resuming from a
    /// resourceVersion they had get 410 Gone and must re-list.
    pub fn force_gone(&self) {
        self.store.lock().compact(None);
        self.end_watches();
    }

    /// Ends every open watch stream (clients reconnect, as after a cut connection).
    pub fn end_watches(&self) {
        self.gone.send_modify(|n| *n += 1);
    }

    /// A receiver that changes whenever open watches must end.
    pub(crate) fn gone_signal(&self) -> watch::Receiver<u64> {
        self.gone.subscribe()
    }

    /// The added latency.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.get().latency_ms)
    }

    /// True if requests from `identity` are cut off.
    pub(crate) fn partitioned(&self, identity: &str) -> bool {
        let faults = self.faults.read().unwrap_or_else(|e| e.into_inner());
        faults.partitioned.iter().any(|p| p == identity)
    }

    /// The watch cut interval.
    pub(crate) fn watch_cut(&self) -> Option<Duration> {
        self.get().watch_cut_seconds.map(Duration::from_secs)
    }

    /// Decides whether this request fails.
    pub(crate) fn error_for(&self, verb: &str, group: &str, resource: &str) -> Option<ApiError> {
        let faults = self.faults.read().unwrap_or_else(|e| e.into_inner());
        for rule in &faults.errors {
            if rule.verb.as_ref().is_some_and(|v| v != verb)
                || !matches_resource(&rule.resource, group, resource)
            {
                continue;
            }
            if self.rng.next_f64() >= rule.rate {
                continue;
            }
            let gr = crate::object::GroupResource::new(group, resource);
            return Some(match rule.code {
                429 => ApiError::too_many_requests(rule.retry_after_seconds.unwrap_or(1)),
                409 => ApiError::conflict(&gr, "", "injected conflict; please retry"),
                _ => ApiError::internal("injected fault"),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controls(rate: f64, seed: u64) -> FaultControls {
        FaultControls::new(
            Faults {
                errors: vec![ErrorRule {
                    verb: Some("list".into()),
                    resource: Some("pods".into()),
                    rate,
                    code: 500,
                    retry_after_seconds: None,
                }],
                ..Faults::default()
            },
            seed,
            Arc::new(Store::new(10)),
        )
    }

    #[test]
    fn the_same_seed_fails_the_same_requests() {
        let (a, b) = (controls(0.3, 9), controls(0.3, 9));
        let run = |c: &FaultControls| {
            (0..200)
                .map(|_| c.error_for("list", "", "pods").is_some())
                .collect::<Vec<_>>()
        };
        let ra = run(&a);
        assert_eq!(ra, run(&b));
        let failed = ra.iter().filter(|x| **x).count();
        assert!(
            (30..90).contains(&failed),
            "about 30% of 200 should fail, got {failed}"
        );
    }

    #[test]
    fn rules_only_hit_their_verb_and_resource() {
        let c = controls(1.0, 1);
        assert!(c.error_for("get", "", "pods").is_none());
        assert!(c.error_for("list", "", "configmaps").is_none());
        assert_eq!(c.error_for("list", "", "pods").map(|e| e.code), Some(500));
    }
}
