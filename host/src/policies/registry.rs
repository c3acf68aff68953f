//! Every policy version the host keeps loaded, by policy name and role.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::broadcast;

use super::access::Access;
use super::pins::Pins;
use super::rollout::{Canary, Signal};
use crate::runtime::{Digest, Policy};

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

/// The part a loaded version plays for its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The version DataJobs are reconciled with.
    Serving,
    /// A version called beside the serving one on the same inputs, whose
    /// answers are compared and never applied (see [`crate::shadow`]).
    Candidate,
}

impl Role {
    /// Every role, serving first.
    pub const ALL: [Self; 2] = [Self::Serving, Self::Candidate];
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Serving => "serving version",
            Self::Candidate => "candidate",
        })
    }
}

/// One loaded version of a policy, in a role.
#[derive(Debug, Clone)]
pub struct Version {
    /// The compiled version.
    pub policy: Arc<Policy>,
    /// Whose DataJobs may call it.
    pub access: Access,
    /// The ConfigMap that offered it (none from a directory).
    pub source: Option<ObjectReference>,
    /// When it was installed.
    pub loaded_at: SystemTime,
}

impl Version {
    /// `policy` for DataJobs of every namespace, from no ConfigMap.
    #[must_use]
    pub fn of(policy: Arc<Policy>) -> Self {
        Self::offered(policy, Access::Everyone, None)
    }

    /// `policy` for the DataJobs `access` allows, offered by `source`.
    #[must_use]
    pub fn offered(policy: Arc<Policy>, access: Access, source: Option<ObjectReference>) -> Self {
        Self {
            policy,
            access,
            source,
            loaded_at: SystemTime::now(),
        }
    }

    /// Its digest, in hex.
    #[must_use]
    pub fn digest(&self) -> String {
        self.policy.digest().to_hex()
    }
}

/// What the registry knows of one role of one policy.
#[derive(Debug, Clone, Default)]
pub struct Slot {
    /// The version in this role, if any.
    pub version: Option<Arc<Version>>,
    /// The last version refused for this role, if it came after the one in it.
    pub rejected: Option<Rejection>,
}

/// The versions some DataJobs of a policy are pinned to ([`super::pins`]).
#[derive(Debug, Clone, Default)]
pub struct Pinned {
    /// Which DataJobs keep which digest.
    pub pins: Pins,
    /// Every pinned version, loaded, by digest.
    pub versions: BTreeMap<Digest, Arc<Version>>,
}

/// What the registry knows of one policy name.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// The version DataJobs are reconciled with.
    pub serving: Slot,
    /// The version called beside it.
    pub candidate: Slot,
    /// The versions pinned DataJobs keep, if any.
    pub pinned: Option<Arc<Pinned>>,
    /// The DataJobs its candidate serves, while a rollout runs.
    pub canary: Option<Arc<Canary>>,
    /// When the serving version was taken out of service, if it was and
    /// nothing came since.
    pub removed_at: Option<SystemTime>,
    /// Serving versions expected from the first list and not yet loaded or
    /// refused ([`Registry::expect`]).
    pub expected: u32,
}

impl Entry {
    /// The slot of `role`.
    #[must_use]
    pub fn slot(&self, role: Role) -> &Slot {
        match role {
            Role::Serving => &self.serving,
            Role::Candidate => &self.candidate,
        }
    }

    /// Whether a change of `role` changes what serves some DataJobs beside
    /// the serving version: the candidate, while a canary is in force.
    fn routes_candidate(&self, role: Role) -> bool {
        role == Role::Candidate && self.canary.is_some()
    }

    /// The candidate, if a canary in force routes to it.
    fn canary_version(&self) -> Option<&Arc<Version>> {
        let canary = self.canary.as_ref()?;
        self.candidate
            .version
            .as_ref()
            .filter(|version| version.policy.digest() == canary.digest)
    }

    fn slot_mut(&mut self, role: Role) -> &mut Slot {
        match role {
            Role::Serving => &mut self.serving,
            Role::Candidate => &mut self.candidate,
        }
    }
}

/// The DataJob a version is chosen for.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid (a rollout's share is by its hash).
    pub uid: &'a str,
}

/// A change of one role of one policy, as [`Registry::subscribe`] announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The policy's name.
    pub policy: String,
    /// Which of its roles changed.
    pub role: Role,
}

/// Every version the host keeps loaded, by policy name and role,
/// hot-swappable without a restart.
///
/// # Guarantees
/// - A swap is atomic: a caller gets the old version or the new one, and a
///   call in flight keeps the `Arc` of the version it started with.
/// - A rejected version never replaces a good one, in any role.
/// - Every change is announced with its role on
///   [`subscribe`](Self::subscribe), so the controller can re-queue the
///   DataJobs that use the policy and the shadow can report a new candidate.
#[derive(Debug)]
pub struct Registry {
    entries: RwLock<HashMap<String, Entry>>,
    changed: broadcast::Sender<Change>,
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

    /// The serving version of `name`.
    pub fn get(&self, name: &str) -> Result<Arc<Policy>, Unavailable> {
        match self.read().get(name) {
            Some(Entry {
                serving:
                    Slot {
                        version: Some(version),
                        ..
                    },
                ..
            }) => Ok(Arc::clone(&version.policy)),
            entry => Err(Self::unavailable(entry)),
        }
    }

    /// The version of `name` for the DataJob `caller`: the one it is
    /// pinned to, else the candidate if a rollout reaches it and the
    /// candidate allows its namespace, else the serving version; refused if
    /// that one does not allow its namespace. Everything is read under one
    /// lock, so a swap or a step is never seen half done; a pass calls
    /// this once, so no DataJob is answered by two versions in one pass.
    pub fn get_for(&self, name: &str, caller: &Caller<'_>) -> Result<Arc<Policy>, Unavailable> {
        let entries = self.read();
        let entry = entries.get(name);
        let pinned = entry
            .and_then(|entry| entry.pinned.as_ref())
            .and_then(|pinned| {
                let digest = pinned.pins.of(caller.namespace, caller.name)?;
                pinned.versions.get(&digest)
            });
        let canary = entry.and_then(Entry::canary_version).filter(|version| {
            version.access.allows(caller.namespace)
                && entry
                    .and_then(|entry| entry.canary.as_ref())
                    .is_some_and(|canary| canary.reach.includes(caller.namespace, caller.uid))
        });
        let serving = entry.and_then(|entry| entry.serving.version.as_ref());
        match pinned.or(canary).or(serving) {
            Some(version) => {
                if version.access.allows(caller.namespace) {
                    Ok(Arc::clone(&version.policy))
                } else {
                    Err(Unavailable::NotAllowed {
                        namespace: caller.namespace.to_owned(),
                        allowed: version.access.clone(),
                    })
                }
            }
            None => Err(Self::unavailable(entry)),
        }
    }

    /// Whether a pin of `name` names the DataJob `caller` (its own, or its
    /// namespace's): its calls are then no serving calls, whatever digest
    /// the pin holds, and no candidate is compared with them.
    pub fn is_pinned(&self, name: &str, caller: &Caller<'_>) -> bool {
        self.read()
            .get(name)
            .and_then(|entry| entry.pinned.as_ref())
            .and_then(|pinned| pinned.pins.of(caller.namespace, caller.name))
            .is_some()
    }

    /// Puts `canary` in force for `name` (none: the candidate serves no
    /// DataJob). The DataJobs of the policy are re-queued when the
    /// DataJobs it reaches changed; the same step keeps counting.
    pub fn roll_out(&self, name: &str, canary: Option<Canary>) {
        let moved = {
            let mut entries = self.write();
            let entry = entries.entry(name.to_owned()).or_default();
            let same = |now: &Canary, new: &Canary| {
                now.digest == new.digest && now.reach == new.reach && now.step == new.step
            };
            match (&entry.canary, canary) {
                (Some(now), Some(new)) if same(now, &new) => false,
                (None, None) => false,
                (now, new) => {
                    let moved = now.as_ref().map(|c| (c.digest, c.reach.clone()))
                        != new.as_ref().map(|c| (c.digest, c.reach.clone()));
                    entry.canary = new.map(Arc::new);
                    moved
                }
            }
        };
        if moved {
            self.announce(name.to_owned(), Role::Serving);
        }
    }

    /// The canary in force for `name`, if any.
    #[must_use]
    pub fn canary(&self, name: &str) -> Option<Arc<Canary>> {
        self.read().get(name).and_then(|entry| entry.canary.clone())
    }

    /// Counts what a pass of `name`'s version `digest` came to, while a
    /// rollout of it runs: for its candidate, or for its serving version
    /// over the same period. Other versions (pinned ones) do not count.
    pub fn observe(&self, name: &str, digest: Digest, signal: Signal) {
        let entries = self.read();
        let Some(entry) = entries.get(name) else {
            return;
        };
        let Some(canary) = &entry.canary else {
            return;
        };
        if canary.digest == digest {
            canary.tally.count(true, signal);
        } else if entry
            .serving
            .version
            .as_ref()
            .is_some_and(|serving| serving.policy.digest() == digest)
        {
            canary.tally.count(false, signal);
        }
    }

    /// Puts `pinned` in force for `name` (none: no DataJob is pinned); the
    /// DataJobs of the policy are re-queued, as by a swap.
    pub fn pin(&self, name: &str, pinned: Option<Pinned>) {
        self.write().entry(name.to_owned()).or_default().pinned = pinned.map(Arc::new);
        self.announce(name.to_owned(), Role::Serving);
    }

    /// The pins in force for `name`, if any.
    #[must_use]
    pub fn pinned(&self, name: &str) -> Option<Arc<Pinned>> {
        self.read().get(name).and_then(|entry| entry.pinned.clone())
    }

    /// The version of `name` in `role`, if there is one.
    #[must_use]
    pub fn version(&self, name: &str, role: Role) -> Option<Arc<Version>> {
        self.read()
            .get(name)
            .and_then(|entry| entry.slot(role).version.clone())
    }

    /// Every version in `role`, by policy name.
    #[must_use]
    pub fn versions(&self, role: Role) -> Vec<(String, Arc<Version>)> {
        self.read()
            .iter()
            .filter_map(|(name, entry)| {
                let version = entry.slot(role).version.clone()?;
                Some((name.clone(), version))
            })
            .collect()
    }

    /// Why an entry with no serving version has none.
    fn unavailable(entry: Option<&Entry>) -> Unavailable {
        match entry {
            Some(Entry {
                serving:
                    Slot {
                        rejected: Some(rejection),
                        ..
                    },
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

    /// Puts `version` in `role` for its policy, replacing any previous
    /// version in that role (and its access). Returns the version it replaced.
    pub fn install(&self, role: Role, version: Version) -> Option<Arc<Version>> {
        let name = version.policy.name().to_owned();
        let (previous, routed) = {
            let mut entries = self.write();
            let entry = entries.entry(name.clone()).or_default();
            if role == Role::Serving {
                entry.removed_at = None;
            }
            let routed = entry.routes_candidate(role);
            let slot = entry.slot_mut(role);
            slot.rejected = None;
            (slot.version.replace(Arc::new(version)), routed)
        };
        self.announce_routed(name, role, routed);
        previous
    }

    /// Expects a serving version of `name` (the first list offers one):
    /// until it is loaded, refused or [`settle`](Self::settle)d, a DataJob
    /// asking for `name` with nothing in service is told
    /// [`Unavailable::Loading`].
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
            entry.expected == 0 && entry.serving.version.is_none()
        };
        if announce {
            self.announce(name.to_owned(), Role::Serving);
        }
    }

    /// Records a version of `name` refused for `role`; the version in that
    /// role, if any, stays.
    ///
    /// The change is announced only when no version is in the role: then,
    /// for the serving role, the DataJobs of the policy should say why;
    /// otherwise nothing changed for them.
    pub fn reject(&self, role: Role, name: &str, reason: &'static str, message: String) {
        let kept = {
            let mut entries = self.write();
            let slot = entries.entry(name.to_owned()).or_default().slot_mut(role);
            slot.rejected = Some(Rejection {
                reason,
                message,
                at: SystemTime::now(),
            });
            slot.version.is_some()
        };
        if !kept {
            self.announce(name.to_owned(), role);
        }
    }

    /// Takes the version of `name` in `role` out of it. Without a serving
    /// version, [`get`](Self::get) answers [`Unavailable::Removed`] until
    /// another version comes; the other role keeps its version.
    pub fn remove(&self, role: Role, name: &str) -> Option<Arc<Version>> {
        let (removed, routed) = {
            let mut entries = self.write();
            let entry = entries.entry(name.to_owned()).or_default();
            if role == Role::Serving {
                entry.removed_at = Some(SystemTime::now());
                entry.expected = 0;
            }
            let routed = entry.routes_candidate(role);
            (std::mem::take(entry.slot_mut(role)).version, routed)
        };
        self.announce_routed(name.to_owned(), role, routed);
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

    /// Each change of a role of a policy (installed, rejected, removed).
    ///
    /// A slow receiver that falls more than 1,024 changes behind gets
    /// `Lagged` and should treat every policy as changed.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changed.subscribe()
    }

    /// Announces a change of `role`; a change of a candidate a canary
    /// routes DataJobs to (`routed`) changes what serves them, and is
    /// announced as a serving change too, so that they are re-queued.
    fn announce_routed(&self, policy: String, role: Role, routed: bool) {
        if routed {
            self.announce(policy.clone(), Role::Serving);
        }
        self.announce(policy, role);
    }

    fn announce(&self, policy: String, role: Role) {
        // No receiver is fine: nobody is waiting for changes yet.
        let _ = self.changed.send(Change { policy, role });
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
        registry.reject(Role::Serving, "p", "Corrupt", "bad bytes".into());
        assert_eq!(
            changes.try_recv().ok().map(|c| c.policy).as_deref(),
            Some("p")
        );
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
        assert_eq!(
            changes.try_recv().ok().map(|c| c.policy).as_deref(),
            Some("p")
        );
        assert_eq!(registry.get("p").unwrap_err(), Unavailable::Unknown);
        // A refusal says why at once, expected or not.
        registry.expect("q");
        registry.reject(
            Role::Serving,
            "q",
            "PullFailed",
            "the registry is down".into(),
        );
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
        assert!(registry.remove(Role::Serving, "p").is_none());
        assert_eq!(
            changes.try_recv().ok().map(|c| c.policy).as_deref(),
            Some("p")
        );
        let why = registry.get("p").unwrap_err();
        assert!(matches!(why, Unavailable::Removed(_)), "{why:?}");
        assert_eq!(
            why.to_string(),
            "the policy was taken out of service: its source was removed"
        );
        registry.reject(Role::Serving, "p", "Corrupt", "x".into());
        assert!(matches!(
            registry.get("p").unwrap_err(),
            Unavailable::Rejected(_)
        ));
        assert!(
            matches!(
                registry
                    .get_for(
                        "p",
                        &Caller {
                            namespace: "team-a",
                            name: "job",
                            uid: "u"
                        }
                    )
                    .unwrap_err(),
                Unavailable::Rejected(_)
            ),
            "no version in service: why, whatever the namespace"
        );
    }

    #[test]
    fn a_candidates_refusal_and_removal_leave_the_serving_role_alone() {
        let registry = Registry::new();
        registry.reject(Role::Serving, "p", "Corrupt", "serving bytes".into());
        let mut changes = registry.subscribe();
        registry.reject(Role::Candidate, "p", "Corrupt", "candidate bytes".into());
        assert_eq!(
            changes.try_recv().ok(),
            Some(Change {
                policy: "p".into(),
                role: Role::Candidate
            })
        );
        let why = registry.get("p").unwrap_err();
        assert_eq!(
            why.to_string(),
            "the policy was rejected (Corrupt): serving bytes"
        );
        assert!(registry.remove(Role::Candidate, "p").is_none());
        assert!(
            matches!(registry.get("p").unwrap_err(), Unavailable::Rejected(_)),
            "the serving role's refusal stays"
        );
        assert!(registry.version("p", Role::Candidate).is_none());
        assert!(registry.versions(Role::Candidate).is_empty());
        let entry = registry.entries().remove("p").expect("known");
        assert!(
            entry.candidate.rejected.is_none(),
            "removal clears the slot"
        );
    }
}
