//! The label fallback: on an API server that ignores shard selectors (the
//! feature gate off, or older than 1.36), each DataJob carries its bucket
//! as the label `policyhost.dev/shard`, and each shard watches the DataJobs
//! labelled with its buckets, so that it is sent only its share there too.
//!
//! A DataJob a team creates has no such label, or one a team wrote (any
//! label is the team's to set): the [`Labeller`] of each shard watches the
//! DataJobs whose label names no bucket and labels those of the buckets it
//! serves; a DataJob labelled with a bucket its uid is not in reaches the
//! shard serving that bucket, whose check of the uid drops it and asks the
//! labeller to correct the label. The uid decides, never the label.

use std::collections::HashMap;

use futures::{StreamExt as _, stream};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{BUCKETS, Bucket, Serving, Share};
use crate::chain::Chain;
use crate::crd::DataJob;
use crate::vocabulary::SHARD_LABEL;

/// The label selector of the DataJobs (or children) of `share`.
#[must_use]
pub fn selector(share: Share) -> String {
    let buckets: Vec<String> = share.buckets().map(|b| b.index().to_string()).collect();
    format!("{SHARD_LABEL} in ({})", buckets.join(","))
}

/// The label selector of the objects whose label names no bucket: none,
/// or another value (`notin` selects objects without the label too).
#[must_use]
pub fn no_bucket_selector() -> String {
    let all: Vec<String> = (0..BUCKETS).map(|b| b.to_string()).collect();
    format!("{SHARD_LABEL} notin ({})", all.join(","))
}

/// A DataJob whose label names a bucket its uid is not in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misplaced {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid, a precondition of the correction.
    pub uid: String,
}

/// Writes the bucket label on the DataJobs of this shard's buckets.
pub struct Labeller {
    client: Client,
    serving: Serving,
    /// Where the DataJobs are watched: all namespaces, or each one.
    apis: Vec<Api<DataJob>>,
    misplaced: mpsc::UnboundedReceiver<Misplaced>,
    /// DataJobs without a bucket label, by uid, until labelled or gone.
    unlabelled: HashMap<String, Misplaced>,
}

impl Labeller {
    /// A labeller over `apis`, hearing of misplaced DataJobs on the
    /// receiver of the returned sender.
    #[must_use]
    pub fn new(
        client: Client,
        serving: Serving,
        apis: Vec<Api<DataJob>>,
    ) -> (Self, mpsc::UnboundedSender<Misplaced>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let labeller = Self {
            client,
            serving,
            apis,
            misplaced: rx,
            unlabelled: HashMap::new(),
        };
        (labeller, tx)
    }

    /// Labels until dropped: each DataJob without a bucket label once its
    /// bucket is served here, and each misplaced one at once.
    pub async fn run(mut self) {
        let config = watcher::Config::default().labels(&no_bucket_selector());
        let apis = std::mem::take(&mut self.apis);
        let mut events = stream::select_all(apis.into_iter().map(|api| {
            watcher::watcher(api, config.clone())
                .default_backoff()
                .boxed()
        }));
        let mut served = self.serving.served_changes();
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => self.observe(event).await,
                    Some(Err(error)) => warn!(error = %Chain(&error), "the unlabelled DataJobs' watch failed; retrying"),
                    None => return,
                },
                Some(misplaced) = self.misplaced.recv() => {
                    self.label(&misplaced).await;
                }
                changed = served.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.label_served().await;
                }
            }
        }
    }

    async fn observe(&mut self, event: watcher::Event<DataJob>) {
        match event {
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                let uid = job.uid().unwrap_or_default();
                self.unlabelled.insert(
                    uid.clone(),
                    Misplaced {
                        namespace: job.namespace().unwrap_or_default(),
                        name: job.name_any(),
                        uid,
                    },
                );
                self.label_served().await;
            }
            watcher::Event::Delete(job) => {
                self.unlabelled.remove(&job.uid().unwrap_or_default());
            }
            watcher::Event::Init => self.unlabelled.clear(),
            watcher::Event::InitDone => {}
        }
    }

    /// Labels the unlabelled DataJobs of the buckets served here.
    async fn label_served(&mut self) {
        let served = self.serving.served();
        let ours: Vec<Misplaced> = self
            .unlabelled
            .values()
            .filter(|job| served.owns_uid(&job.uid))
            .cloned()
            .collect();
        for job in ours {
            if self.label(&job).await {
                self.unlabelled.remove(&job.uid);
            }
        }
    }

    /// Writes the label of `job`'s bucket, the uid a precondition.
    async fn label(&self, job: &Misplaced) -> bool {
        let bucket = Bucket::of_uid(&job.uid).index().to_string();
        let api: Api<DataJob> = Api::namespaced(self.client.clone(), &job.namespace);
        let patch = json!({"metadata": {"uid": job.uid, "labels": {SHARD_LABEL: bucket}}});
        match api
            .patch(&job.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                debug!(namespace = %job.namespace, name = %job.name, %bucket, "labelled a DataJob with its bucket");
                true
            }
            Err(error) => {
                warn!(namespace = %job.namespace, name = %job.name, error = %Chain(&error), "cannot label a DataJob with its bucket");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_name_buckets_by_index() {
        let share = Share::from_buckets([0, 5, 63].map(|i| Bucket::new(i).unwrap()));
        assert_eq!(selector(share), "policyhost.dev/shard in (0,5,63)");
        let none = no_bucket_selector();
        assert!(none.starts_with("policyhost.dev/shard notin (0,1,2,"));
        assert!(none.ends_with(",62,63)"));
    }
}
