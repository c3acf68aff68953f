//! What this replica may do right now: lead (reconcile and write) or follow.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

/// The replica's role as last decided by its elector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// This replica holds the Lease.
    Leader,
    /// Another replica holds the Lease, or nobody does yet.
    Follower {
        /// The holder last seen on the Lease, if any.
        leader: Option<String>,
    },
}

/// A shared handle on the replica's role, read by workers, the write fence
/// and the readiness endpoint, and written by the [`Elector`](super::Elector).
///
/// Without election ([`Leadership::unelected`]) the replica always leads.
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None`: always leading (no election).
    state: Option<Mutex<State>>,
    /// True while leading; workers and the resync wait on it.
    leading: watch::Sender<bool>,
}

struct State {
    /// Writes are permitted until then; `None` while following.
    valid_until: Option<Instant>,
    /// The holder last seen on the Lease.
    holder: Option<String>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("role", &self.role())
            .finish()
    }
}

impl Leadership {
    /// A replica that always leads: leader election is off.
    #[must_use]
    pub fn unelected() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: None,
                leading: watch::Sender::new(true),
            }),
        }
    }

    /// A replica that follows until its elector wins the Lease.
    #[must_use]
    pub fn elected() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Some(Mutex::new(State {
                    valid_until: None,
                    holder: None,
                })),
                leading: watch::Sender::new(false),
            }),
        }
    }

    /// True when leader election is on.
    #[must_use]
    pub fn is_elected(&self) -> bool {
        self.inner.state.is_some()
    }

    /// True if a write may be sent now: leading, and the last successful
    /// renewal is younger than the renew deadline.
    #[must_use]
    pub fn permits_writes(&self) -> bool {
        match self.state() {
            None => true,
            Some(state) => state.valid_until.is_some_and(|t| Instant::now() < t),
        }
    }

    /// The role now (a leader past its validity is already a follower).
    #[must_use]
    pub fn role(&self) -> Role {
        match self.state() {
            None => Role::Leader,
            Some(state) => {
                if state.valid_until.is_some_and(|t| Instant::now() < t) {
                    Role::Leader
                } else {
                    Role::Follower {
                        leader: state.holder.clone(),
                    }
                }
            }
        }
    }

    /// A receiver of leading (true) / following (false) changes, as the
    /// elector decides them.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.leading.subscribe()
    }

    /// Leads until `valid_until` (a successful renewal).
    pub(crate) fn lead_until(&self, valid_until: Instant, identity: &str) {
        if let Some(mut state) = self.state() {
            state.valid_until = Some(valid_until);
            state.holder = Some(identity.to_owned());
        }
        self.inner.leading.send_if_modified(|leading| {
            let changed = !*leading;
            *leading = true;
            changed
        });
    }

    /// Follows `holder`: the fence closes at once.
    pub(crate) fn follow(&self, holder: Option<String>) {
        if let Some(mut state) = self.state() {
            state.valid_until = None;
            state.holder = holder;
        }
        self.inner.leading.send_if_modified(|leading| {
            let changed = *leading;
            *leading = false;
            changed
        });
    }

    /// Until when writes are permitted, if leading.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.state().and_then(|state| state.valid_until)
    }

    fn state(&self) -> Option<MutexGuard<'_, State>> {
        // The state is two plain fields: a poisoned lock still holds a consistent value.
        self.inner
            .state
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_unelected_replica_always_leads_and_writes() {
        let leadership = Leadership::unelected();
        assert!(leadership.permits_writes());
        assert_eq!(leadership.role(), Role::Leader);
        assert!(*leadership.subscribe().borrow());
        assert!(!leadership.is_elected());
    }

    #[tokio::test(start_paused = true)]
    async fn an_elected_replica_writes_only_until_its_validity() {
        let leadership = Leadership::elected();
        let changes = leadership.subscribe();
        assert!(!leadership.permits_writes());
        assert_eq!(leadership.role(), Role::Follower { leader: None });

        leadership.lead_until(Instant::now() + Duration::from_secs(10), "me");
        assert!(leadership.permits_writes());
        assert!(*changes.borrow());
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(leadership.permits_writes());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            !leadership.permits_writes(),
            "the fence closes at the validity even before the elector says so"
        );
        assert_eq!(
            leadership.role(),
            Role::Follower {
                leader: Some("me".into())
            }
        );
    }

    #[test]
    fn following_closes_the_fence_at_once_and_notifies() {
        let leadership = Leadership::elected();
        let mut changes = leadership.subscribe();
        leadership.lead_until(Instant::now() + Duration::from_secs(60), "me");
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        leadership.follow(Some("other".into()));
        assert!(!leadership.permits_writes());
        assert!(changes.has_changed().unwrap_or(false));
        assert!(!*changes.borrow_and_update());
        assert_eq!(
            leadership.role(),
            Role::Follower {
                leader: Some("other".into())
            }
        );
        // Following again is no change.
        leadership.follow(Some("other".into()));
        assert!(!changes.has_changed().unwrap_or(true));
    }
}
