//! The pulls of the artifacts policy ConfigMaps name, apart from the loads:
//! a pull waits on a registry, a load on the CPU, and a load worker must
//! never wait for a registry.
//!
//! # Guarantees
//! - A pull holds no load worker and no compile slot: it runs on a task of
//!   its own, and its result is queued for a load worker once it is there.
//! - Pulls are bounded per team ([`PER_TEAM`]) and per registry
//!   ([`PER_REGISTRY`]), the team's bound taken first: one team's slow
//!   registry holds that team's pulls, never another team's, and a team
//!   alone holds at most half of any registry's.
//! - One pull per ConfigMap: newer content, or the ConfigMap's deletion,
//!   ends the pull of the older content ([`Pulls::cancel`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use crate::cache::ObjectKey;
use crate::fair::Team;

/// Pulls of one team at once.
pub const PER_TEAM: usize = 2;
/// Pulls from one registry at once.
pub const PER_REGISTRY: usize = 2 * PER_TEAM;

/// The pulls in flight, and their bounds.
#[derive(Default)]
pub(super) struct Pulls {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    teams: HashMap<Arc<str>, Arc<Semaphore>>,
    registries: HashMap<String, Arc<Semaphore>>,
    /// The pull of each ConfigMap, with the number that tells it from a
    /// later one of the same ConfigMap.
    running: HashMap<ObjectKey, (u64, AbortHandle)>,
    started: u64,
}

impl Pulls {
    /// Runs `pull` for the ConfigMap `key` of `team`, from `registry`,
    /// once the bounds allow; a pull of the same ConfigMap in flight is
    /// ended first.
    pub(super) fn start<F>(self: &Arc<Self>, key: ObjectKey, team: &Team, registry: &str, pull: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut state = self.state();
        // Bounds nobody holds or waits for are dropped.
        state.teams.retain(|_, bound| Arc::strong_count(bound) > 1);
        state
            .registries
            .retain(|_, bound| Arc::strong_count(bound) > 1);
        let team_bound = Arc::clone(
            state
                .teams
                .entry(Arc::clone(team.key()))
                .or_insert_with(|| Arc::new(Semaphore::new(PER_TEAM))),
        );
        let registry_bound = Arc::clone(
            state
                .registries
                .entry(registry.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(PER_REGISTRY))),
        );
        state.started += 1;
        let number = state.started;
        let this = Arc::clone(self);
        let finished = key.clone();
        let task = tokio::spawn(async move {
            let Ok(_team) = team_bound.acquire_owned().await else {
                return;
            };
            let Ok(_registry) = registry_bound.acquire_owned().await else {
                return;
            };
            pull.await;
            this.finished(&finished, number);
        });
        if let Some((_, older)) = state.running.insert(key, (number, task.abort_handle())) {
            older.abort();
        }
    }

    /// Ends the pull of `key`, if one is in flight: its content is no
    /// longer the ConfigMap's.
    pub(super) fn cancel(&self, key: &ObjectKey) {
        if let Some((_, pull)) = self.state().running.remove(key) {
            pull.abort();
        }
    }

    /// Whether a pull of `key` is in flight.
    #[cfg(test)]
    pub(super) fn is_running(&self, key: &ObjectKey) -> bool {
        self.state().running.contains_key(key)
    }

    /// Ends every pull (the host is stopping).
    pub(super) fn cancel_all(&self) {
        for (_, (_, pull)) in self.state().running.drain() {
            pull.abort();
        }
    }

    fn finished(&self, key: &ObjectKey, number: u64) {
        let mut state = self.state();
        if state.running.get(key).is_some_and(|(n, _)| *n == number) {
            state.running.remove(key);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("policyhost-system", name)
    }

    /// A pull that reports its start and then waits for ever.
    fn stalled(
        started: &mpsc::UnboundedSender<String>,
        name: &str,
    ) -> impl Future<Output = ()> + use<> {
        let (started, name) = (started.clone(), name.to_owned());
        async move {
            let _ = started.send(name);
            std::future::pending::<()>().await;
        }
    }

    async fn started_within(
        started: &mut mpsc::UnboundedReceiver<String>,
        wait: Duration,
    ) -> Vec<String> {
        let mut names = Vec::new();
        let _ = tokio::time::timeout(wait, async {
            while let Some(name) = started.recv().await {
                names.push(name);
            }
        })
        .await;
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_team_whose_registry_never_answers_holds_only_its_own_pulls() {
        let pulls = Arc::new(Pulls::default());
        let (sender, mut started) = mpsc::unbounded_channel();
        let slow = Team::of_policy("slow");
        for i in 0..10 {
            let name = format!("slow-{i}");
            pulls.start(key(&name), &slow, "stalls.example", stalled(&sender, &name));
        }
        let first = started_within(&mut started, Duration::from_millis(200)).await;
        assert_eq!(first.len(), PER_TEAM, "{first:?}");
        // Another team, on the same registry and on another: both start.
        pulls.start(
            key("a"),
            &Team::of_policy("a"),
            "stalls.example",
            stalled(&sender, "a"),
        );
        pulls.start(
            key("b"),
            &Team::of_policy("b"),
            "other.example",
            stalled(&sender, "b"),
        );
        let then = started_within(&mut started, Duration::from_millis(200)).await;
        assert_eq!(then, ["a", "b"]);
        pulls.cancel_all();
        assert!(!pulls.is_running(&key("a")));
    }

    #[tokio::test]
    async fn a_registry_serves_a_bounded_number_of_pulls_whatever_the_teams() {
        let pulls = Arc::new(Pulls::default());
        let (sender, mut started) = mpsc::unbounded_channel();
        for team in ["a", "b", "c"] {
            for i in 0..PER_TEAM {
                let name = format!("{team}-{i}");
                let team = Team::of_policy(team);
                pulls.start(key(&name), &team, "stalls.example", stalled(&sender, &name));
            }
        }
        let first = started_within(&mut started, Duration::from_millis(200)).await;
        assert_eq!(first.len(), PER_REGISTRY, "{first:?}");
        // One of them ends: a waiting pull of that registry takes its place.
        pulls.cancel(&key(&first[0]));
        let next = started_within(&mut started, Duration::from_millis(200)).await;
        assert_eq!(next.len(), 1, "{next:?}");
        assert!(!first.contains(&next[0]), "{next:?} started twice");
        pulls.cancel_all();
    }

    #[tokio::test]
    async fn a_newer_pull_of_a_configmap_ends_the_older_one() {
        let pulls = Arc::new(Pulls::default());
        let (sender, mut started) = mpsc::unbounded_channel();
        let team = Team::of_policy("p");
        let (done, mut finished) = mpsc::unbounded_channel();
        pulls.start(key("p"), &team, "r", stalled(&sender, "old"));
        assert_eq!(
            started_within(&mut started, Duration::from_millis(100)).await,
            ["old"]
        );
        pulls.start(key("p"), &team, "r", async move {
            let _ = done.send(());
        });
        tokio::time::timeout(Duration::from_secs(5), finished.recv())
            .await
            .expect("the newer pull runs")
            .expect("it finished");
        tokio::time::timeout(Duration::from_secs(5), async {
            while pulls.is_running(&key("p")) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("and is no longer running");
        pulls.start(key("q"), &team, "r", stalled(&sender, "q"));
        pulls.cancel(&key("q"));
        assert!(!pulls.is_running(&key("q")));
    }
}
