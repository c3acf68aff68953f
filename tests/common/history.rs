//! Every version of a namespace's DataJobs as a watch delivers them, and
//! when: what the finalizer and outbound tests check a release against.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};
use policyhost::crd::DataJob;
use policyhost::finalizer::{FINALIZER, FORCE_RELEASE_ANNOTATION};
use tokio::task::JoinHandle;

use super::cluster::Env;

/// One delivered version.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Created or changed (or listed at the start).
    Applied(DataJob),
    /// Gone from the API.
    Deleted(DataJob),
}

impl Seen {
    /// The version itself.
    pub fn job(&self) -> &DataJob {
        let (Self::Applied(job) | Self::Deleted(job)) = self;
        job
    }
}

/// The watch and what it delivered so far; stopped when dropped.
pub struct History {
    seen: Arc<Mutex<Vec<(Instant, Seen)>>>,
    task: JoinHandle<()>,
}

impl History {
    /// Starts watching `env`'s DataJobs.
    pub fn start(env: &Env) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let events = watcher(env.jobs(), watcher::Config::default()).default_backoff();
        let task = tokio::spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let seen = match event {
                    Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) => {
                        Seen::Applied(job)
                    }
                    Ok(watcher::Event::Delete(job)) => Seen::Deleted(job),
                    _ => continue,
                };
                lock(&sink).push((Instant::now(), seen));
            }
        });
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

    /// How many DataJobs were seen to go.
    pub fn releases(&self) -> usize {
        lock(&self.seen)
            .iter()
            .filter(|(_, seen)| matches!(seen, Seen::Deleted(_)))
            .count()
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
