//! The policies in service, by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use tokio::sync::broadcast;

use crate::runtime::Policy;

/// Why a policy name has no version to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// No version of it was ever loaded (or it was removed).
    Unknown,
    /// Every version offered was rejected; the last rejection.
    Rejected(Rejection),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown => f.write_str("no policy of this name is loaded"),
            Self::Rejected(rejection) => write!(
                f,
                "the policy was rejected ({}): {}",
                rejection.reason, rejection.message
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
    /// When the version in service was installed.
    pub loaded_at: Option<SystemTime>,
    /// The last rejected version, if it came after the one in service.
    pub rejected: Option<Rejection>,
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
            Some(Entry {
                rejected: Some(rejection),
                ..
            }) => Err(Unavailable::Rejected(rejection.clone())),
            _ => Err(Unavailable::Unknown),
        }
    }

    /// Puts `policy` in service under its name, replacing any previous version.
    /// Returns the version it replaced.
    pub fn install(&self, policy: Arc<Policy>) -> Option<Arc<Policy>> {
        let name = policy.name().to_owned();
        let previous = {
            let mut entries = self.write();
            let entry = entries.entry(name.clone()).or_default();
            entry.rejected = None;
            entry.loaded_at = Some(SystemTime::now());
            entry.serving.replace(policy)
        };
        self.announce(name);
        previous
    }

    /// Records a rejected version of `name`; the version in service, if any, stays.
    pub fn reject(&self, name: &str, reason: &'static str, message: String) {
        self.write().entry(name.to_owned()).or_default().rejected = Some(Rejection {
            reason,
            message,
            at: SystemTime::now(),
        });
        self.announce(name.to_owned());
    }

    /// Takes `name` out of service.
    pub fn remove(&self, name: &str) -> Option<Arc<Policy>> {
        let removed = self.write().remove(name).and_then(|entry| entry.serving);
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
