//! Every version of a namespace's DataJobs as a watch delivers them, and
//! when: what the finalizer and outbound tests check a release against.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};
use policyhost::crd::DataJob;
use tokio::task::JoinHandle;

use super::cluster::{Env, PATIENCE};
use policyhost::vocabulary::{FINALIZER, FORCE_RELEASE_ANNOTATION};

/// One delivered version.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Created or changed (or listed at the start).
    Applied(DataJob),
    /// Gone from the API (its last version seen, when the watch missed the
    /// deletion itself and found it gone at its next list).
    Deleted(DataJob),
}

impl Seen {
    /// The version itself.
    pub fn job(&self) -> &DataJob {
        let (Self::Applied(job) | Self::Deleted(job)) = self;
        job
    }
}

/// The DataJobs the watch has shown and not seen go: a deletion that falls
/// in a gap of the watch (the API server compacted past its resource
/// version, so the watcher lists again) is delivered by no `Delete` event,
/// and shows only as a name missing from the new list.
#[derive(Default)]
struct Live {
    jobs: HashMap<String, DataJob>,
    /// The names of the list in progress.
    listing: Option<HashSet<String>>,
}

impl Live {
    /// What `event` shows: a version, or the versions gone.
    fn seen(&mut self, event: watcher::Event<DataJob>) -> Vec<Seen> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(job) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(job.name_any());
                }
                self.applied(job)
            }
            watcher::Event::Apply(job) => self.applied(job),
            watcher::Event::Delete(job) => {
                self.jobs.remove(&job.name_any());
                vec![Seen::Deleted(job)]
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let gone: Vec<String> = (self.jobs.keys())
                    .filter(|name| !listed.contains(*name))
                    .cloned()
                    .collect();
                gone.iter()
                    .filter_map(|name| self.jobs.remove(name))
                    .map(Seen::Deleted)
                    .collect()
            }
        }
    }

    fn applied(&mut self, job: DataJob) -> Vec<Seen> {
        self.jobs.insert(job.name_any(), job.clone());
        vec![Seen::Applied(job)]
    }
}

/// The watch and what it delivered so far; stopped when dropped.
pub struct History {
    seen: Arc<Mutex<Vec<(Instant, Seen)>>>,
    task: JoinHandle<()>,
}

impl History {
    /// Starts watching `env`'s DataJobs, and returns once the watch has
    /// listed them: a DataJob deleted and released from then on is seen to
    /// go (one released before that first list would never be seen at all).
    pub async fn start(env: &Env) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let events = watcher(env.jobs(), watcher::Config::default()).default_backoff();
        let (listed, first_list) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            futures::pin_mut!(events);
            let mut live = Live::default();
            let mut listed = Some(listed);
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let list_done = matches!(event, watcher::Event::InitDone);
                let now = Instant::now();
                lock(&sink).extend(live.seen(event).into_iter().map(|seen| (now, seen)));
                if list_done && let Some(listed) = listed.take() {
                    let _ = listed.send(());
                }
            }
        });
        tokio::time::timeout(PATIENCE, first_list)
            .await
            .expect("the DataJobs listed within the patience")
            .expect("the watch runs");
        Self { seen, task }
    }

    /// The versions of `name` seen so far.
    pub fn of(&self, name: &str) -> Vec<Seen> {
        lock(&self.seen)
            .iter()
            .filter(|(_, seen)| seen.job().name_any() == name)
            .map(|(_, seen)| seen.clone())
            .collect()
    }

    /// The last state of `name` when it was deleted, once it was.
    pub fn released(&self, name: &str) -> Option<DataJob> {
        self.release_of(name).map(|(_, job)| job)
    }

    /// When the watch saw `name` go, once it did.
    pub fn released_at(&self, name: &str) -> Option<Instant> {
        self.release_of(name).map(|(at, _)| at)
    }

    /// How many DataJobs were seen to go (each once, however often a
    /// watch that lists again reports it gone).
    pub fn releases(&self) -> usize {
        lock(&self.seen)
            .iter()
            .filter_map(|(_, seen)| match seen {
                Seen::Deleted(job) => Some(job.name_any()),
                Seen::Applied(_) => None,
            })
            .collect::<HashSet<_>>()
            .len()
    }

    fn release_of(&self, name: &str) -> Option<(Instant, DataJob)> {
        lock(&self.seen).iter().find_map(|(at, seen)| match seen {
            Seen::Deleted(job) if job.name_any() == name => Some((*at, job.clone())),
            _ => None,
        })
    }

    /// Asserts that every version of `name` that was being deleted held the
    /// finalizer, unless a person had asked for a force release.
    pub fn assert_held_while_terminating(&self, name: &str) {
        for seen in self.of(name) {
            if let Seen::Applied(job) = seen
                && job.metadata.deletion_timestamp.is_some()
                && !job.annotations().contains_key(FORCE_RELEASE_ANNOTATION)
            {
                assert!(
                    job.finalizers().iter().any(|f| f == FINALIZER),
                    "{name} lost the finalizer while Terminating: {:?} (resourceVersion {:?})",
                    job.finalizers(),
                    job.resource_version()
                );
            }
        }
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> DataJob {
        DataJob::new(name, policyhost::crd::DataJobSpec::default())
    }

    fn names(seen: &[Seen]) -> Vec<(bool, String)> {
        seen.iter()
            .map(|s| (matches!(s, Seen::Deleted(_)), s.job().name_any()))
            .collect()
    }

    /// A deletion the watch missed shows as a name the next list lacks;
    /// the first list reports nothing gone.
    #[test]
    fn a_job_missing_from_a_new_list_is_seen_deleted_once() {
        let mut live = Live::default();
        let mut seen = Vec::new();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(job("a")),
            watcher::Event::InitApply(job("b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(job("c")),
            watcher::Event::Delete(job("a")),
            watcher::Event::Init,
            watcher::Event::InitApply(job("c")),
            watcher::Event::InitDone,
            watcher::Event::Init,
            watcher::Event::InitDone,
        ] {
            seen.extend(live.seen(event));
        }
        let deleted = |name: &str| (true, name.to_owned());
        let applied = |name: &str| (false, name.to_owned());
        assert_eq!(
            names(&seen),
            [
                applied("a"),
                applied("b"),
                applied("c"),
                deleted("a"),
                applied("c"),
                deleted("b"),
                deleted("c"),
            ]
        );
    }
}
