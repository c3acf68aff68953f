//! The policies in service, by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use tokio::sync::broadcast;

use super::access::Access;
use crate::runtime::Policy;

/// Why a policy name has no version to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// No version of it was ever loaded.
    Unknown,
    /// Its first version is being loaded (after a start, the first list
    /// offered one): its DataJobs wait for it quietly.
    Loading,
    /// Every version offered was rejected; the last rejection.
    Rejected(Rejection),
    /// It was taken out of service (its ConfigMap was deleted) at this time.
    Removed(SystemTime),
    /// A version serves, but not DataJobs of this namespace (its
    /// ConfigMap's `data.allowedNamespaces`).
    NotAllowed {
        /// The DataJob's namespace.
        namespace: String,
        /// Whose DataJobs may use it.
        allowed: Access,
    },
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown => f.write_str("no policy of this name is loaded"),
            Self::Loading => f.write_str("the policy's version is still loading"),
            Self::Rejected(rejection) => write!(
                f,
                "the policy was rejected ({}): {}",
                rejection.reason, rejection.message
            ),
            Self::Removed(_) => {
                f.write_str("the policy was taken out of service: its source was removed")
            }
            Self::NotAllowed { namespace, allowed } => write!(
                f,
                "the policy does not allow DataJobs of namespace {namespace} (its ConfigMap's `data.allowedNamespaces` is `{allowed}`)"
            ),
        }
    }
}

/// A version of a policy that failed to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// A one-word reason, e.g. `UnsupportedImport`.
    pub reason: &'static str,
    /// What was wrong, with its causes.
    pub message: String,
    /// When it was rejected.
    pub at: SystemTime,
}

/// What the registry knows of one policy name.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// The version in service, if any.
    pub serving: Option<Arc<Policy>>,
    /// Whose DataJobs may call the version in service.
    pub access: Access,
    /// When the version in service was installed.
    pub loaded_at: Option<SystemTime>,
    /// The last rejected version, if it came after the one in service.
    pub rejected: Option<Rejection>,
    /// When it was taken out of service, if it was and nothing came since.
    pub removed_at: Option<SystemTime>,
    /// Versions expected from the first list and not yet loaded or
    /// refused ([`Registry::expect`]).
    pub expected: u32,
}

/// The policies in service, hot-swappable without a restart.
///
/// # Guarantees
/// - A swap is atomic: a caller gets the old version or the new one, and a
///   call in flight keeps the `Arc` of the version it started with.
/// - A rejected version never replaces a good one.
/// - Every change is announced on [`subscribe`](Self::subscribe), so the
///   controller can re-queue the DataJobs that use the policy.
#[derive(Debug)]
pub struct Registry {
    entries: RwLock<HashMap<String, Entry>>,
    changed: broadcast::Sender<String>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            entries: RwLock::new(HashMap::new()),
            changed: broadcast::channel(1024).0,
        }
    }
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The version of `name` in service.
    pub fn get(&self, name: &str) -> Result<Arc<Policy>, Unavailable> {
        match self.read().get(name) {
            Some(Entry {
                serving: Some(policy),
                ..
            }) => Ok(Arc::clone(policy)),
            entry => Err(Self::unavailable(entry)),
        }
    }

    /// The version of `name` in service, if DataJobs of `namespace` may
    /// call it. The version and its access are read under one lock, so a
    /// swap that changes both is never seen half done.
    pub fn get_for(&self, name: &str, namespace: &str) -> Result<Arc<Policy>, Unavailable> {
        match self.read().get(name) {
            Some(Entry {
                serving: Some(policy),
                access,
                ..
            }) => {
                if access.allows(namespace) {
                    Ok(Arc::clone(policy))
                } else {
                    Err(Unavailable::NotAllowed {
                        namespace: namespace.to_owned(),
                        allowed: access.clone(),
                    })
                }
            }
            entry => Err(Self::unavailable(entry)),
        }
    }

    /// Why an entry with no version in service has none.
    fn unavailable(entry: Option<&Entry>) -> Unavailable {
        match entry {
            Some(Entry {
                rejected: Some(rejection),
                ..
            }) => Unavailable::Rejected(rejection.clone()),
            Some(Entry {
                removed_at: Some(at),
                ..
            }) => Unavailable::Removed(*at),
            Some(entry) if entry.expected > 0 => Unavailable::Loading,
            _ => Unavailable::Unknown,
        }
    }

    /// Puts `policy` in service under its name for DataJobs of every
    /// namespace, replacing any previous version. Returns the version it replaced.
    pub fn install(&self, policy: Arc<Policy>) -> Option<Arc<Policy>> {
        self.install_for(policy, Access::Everyone)
    }

    /// Puts `policy` in service for the DataJobs `access` allows, replacing
    /// any previous version (and its access). Returns the version it replaced.
    pub fn install_for(&self, policy: Arc<Policy>, access: Access) -> Option<Arc<Policy>> {
        let name = policy.name().to_owned();
        let previous = {
            let mut entries = self.write();
            let entry = entries.entry(name.clone()).or_default();
            entry.access = access;
            entry.rejected = None;
            entry.removed_at = None;
            entry.loaded_at = Some(SystemTime::now());
            entry.serving.replace(policy)
        };
        self.announce(name);
        previous
    }

    /// Expects a version of `name` (the first list offers one): until it is
    /// loaded, refused or [`settle`](Self::settle)d, a DataJob asking for
    /// `name` with nothing in service is told [`Unavailable::Loading`].
    pub fn expect(&self, name: &str) {
        self.write().entry(name.to_owned()).or_default().expected += 1;
    }

    /// One expected version of `name` was processed, whatever came of it.
    /// Announced when nothing serves and nothing more is expected, so that
    /// its DataJobs say why (a version that was not even offered for it,
    /// say another ConfigMap's claim).
    pub fn settle(&self, name: &str) {
        let announce = {
            let mut entries = self.write();
            let Some(entry) = entries.get_mut(name) else {
                return;
            };
            entry.expected = entry.expected.saturating_sub(1);
            entry.expected == 0 && entry.serving.is_none()
        };
        if announce {
            self.announce(name.to_owned());
        }
    }

    /// Records a rejected version of `name`; the version in service, if any, stays.
    ///
    /// The change is announced only when no version serves: then the
    /// DataJobs of the policy should say why; otherwise nothing changed for them.
    pub fn reject(&self, name: &str, reason: &'static str, message: String) {
        let serving = {
            let mut entries = self.write();
            let entry = entries.entry(name.to_owned()).or_default();
            entry.rejected = Some(Rejection {
                reason,
                message,
                at: SystemTime::now(),
            });
            entry.serving.is_some()
        };
        if !serving {
            self.announce(name.to_owned());
        }
    }

    /// Takes `name` out of service; [`get`](Self::get) then answers
    /// [`Unavailable::Removed`] until another version comes.
    pub fn remove(&self, name: &str) -> Option<Arc<Policy>> {
        let removed = {
            let mut entries = self.write();
            let entry = entries.entry(name.to_owned()).or_default();
            std::mem::replace(
                entry,
                Entry {
                    removed_at: Some(SystemTime::now()),
                    ..Entry::default()
                },
            )
            .serving
        };
        self.announce(name.to_owned());
        removed
    }

    /// Every name the registry knows, with its state, sorted by name.
    #[must_use]
    pub fn entries(&self) -> BTreeMap<String, Entry> {
        self.read()
            .iter()
            .map(|(name, entry)| (name.clone(), entry.clone()))
            .collect()
    }

    /// Names of policies as they change (installed, rejected, removed).
    ///
    /// A slow receiver that falls more than 1,024 changes behind gets
    /// `Lagged` and should treat every policy as changed.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    fn announce(&self, name: String) {
        // No receiver is fine: nobody is waiting for changes yet.
        let _ = self.changed.send(name);
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.entries.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_with_nothing_in_service_is_announced_and_reported() {
        let registry = Registry::new();
        let mut changes = registry.subscribe();
        registry.reject("p", "Corrupt", "bad bytes".into());
        assert_eq!(changes.try_recv().ok().as_deref(), Some("p"));
        let why = registry.get("p").unwrap_err();
        assert_eq!(
            why.to_string(),
            "the policy was rejected (Corrupt): bad bytes"
        );
    }

    #[test]
    fn an_expected_policy_is_loading_until_it_serves_or_is_settled() {
        let registry = Registry::new();
        registry.expect("p");
        registry.expect("p");
        assert_eq!(registry.get("p").unwrap_err(), Unavailable::Loading);
        let mut changes = registry.subscribe();
        registry.settle("p");
        assert!(changes.try_recv().is_err(), "one is still expected");
        assert_eq!(registry.get("p").unwrap_err(), Unavailable::Loading);
        registry.settle("p");
        assert_eq!(changes.try_recv().ok().as_deref(), Some("p"));
        assert_eq!(registry.get("p").unwrap_err(), Unavailable::Unknown);
        // A refusal says why at once, expected or not.
        registry.expect("q");
        registry.reject("q", "PullFailed", "the registry is down".into());
        assert!(matches!(
            registry.get("q").unwrap_err(),
            Unavailable::Rejected(_)
        ));
        assert_eq!(
            Unavailable::Loading.to_string(),
            "the policy's version is still loading"
        );
    }

    #[test]
    fn a_namespace_the_policy_does_not_allow_is_named_with_the_list() {
        let why = Unavailable::NotAllowed {
            namespace: "team-b".into(),
            allowed: Access::parse("team-a,shared").expect("a list"),
        };
        assert_eq!(
            why.to_string(),
            "the policy does not allow DataJobs of namespace team-b (its ConfigMap's `data.allowedNamespaces` is `shared,team-a`)"
        );
    }

    #[test]
    fn a_removed_policy_says_so_until_another_version_comes() {
        let registry = Registry::new();
        assert_eq!(registry.get("p").unwrap_err(), Unavailable::Unknown);
        let mut changes = registry.subscribe();
        assert!(registry.remove("p").is_none());
        assert_eq!(changes.try_recv().ok().as_deref(), Some("p"));
        let why = registry.get("p").unwrap_err();
        assert!(matches!(why, Unavailable::Removed(_)), "{why:?}");
        assert_eq!(
            why.to_string(),
            "the policy was taken out of service: its source was removed"
        );
        registry.reject("p", "Corrupt", "x".into());
        assert!(matches!(
            registry.get("p").unwrap_err(),
            Unavailable::Rejected(_)
        ));
        assert!(
            matches!(
                registry.get_for("p", "team-a").unwrap_err(),
                Unavailable::Rejected(_)
            ),
            "no version in service: why, whatever the namespace"
        );
    }
}
