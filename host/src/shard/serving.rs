//! The buckets this replica serves now, and the calls in flight in each:
//! the gate a worker passes before it reconciles, and what a handover
//! waits on before it lets a bucket go.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, watch};

use super::{BUCKETS, Bucket, Share};

/// What this replica serves and watches. Cloned handles share one state.
#[derive(Clone)]
pub struct Serving {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Woken each time a call in flight ends.
    ended: Notify,
    /// The buckets the watches select; `None`: not sharded, watch all.
    watched: watch::Sender<Option<Share>>,
    /// The share each watch stream has completed a list of, by stream.
    synced: watch::Sender<Vec<Share>>,
    /// The buckets served, for those who act on a change.
    served: watch::Sender<Share>,
}

struct State {
    served: Share,
    in_flight: [u32; BUCKETS],
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

impl Serving {
    /// One replica serving every bucket, its watches unfiltered.
    #[must_use]
    pub fn everything() -> Self {
        Self::with(Share::ALL, None)
    }

    /// A shard that serves nothing yet and watches nothing, until its
    /// membership grants it buckets.
    #[must_use]
    pub fn sharded() -> Self {
        Self::with(Share::default(), Some(Share::default()))
    }

    fn with(served: Share, watched: Option<Share>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    served,
                    in_flight: [0; BUCKETS],
                }),
                ended: Notify::new(),
                watched: watch::Sender::new(watched),
                synced: watch::Sender::new(Vec::new()),
                served: watch::Sender::new(served),
            }),
        }
    }

    /// Whether the replica is one shard of several.
    #[must_use]
    pub fn is_sharded(&self) -> bool {
        self.inner.watched.borrow().is_some()
    }

    /// The buckets served now.
    #[must_use]
    pub fn served(&self) -> Share {
        self.state().served
    }

    /// Starts a call for the object of `uid` if its bucket is served; the
    /// bucket is not let go until the returned guard drops.
    #[must_use]
    pub fn begin(&self, uid: &str) -> Option<InFlight> {
        let bucket = Bucket::of_uid(uid);
        let mut state = self.state();
        if !state.served.contains(bucket) {
            return None;
        }
        state.in_flight[bucket.index()] += 1;
        Some(InFlight {
            serving: self.clone(),
            bucket,
        })
    }

    /// Stops serving `share`: no call starts in it from now on.
    pub fn withdraw(&self, share: Share) {
        let mut state = self.state();
        state.served = state.served.without(share);
        self.inner.served.send_replace(state.served);
    }

    /// Waits until no call is in flight in `share` (after [`withdraw`](Self::withdraw)).
    pub async fn drained(&self, share: Share) {
        loop {
            let ended = self.inner.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let busy = {
                let state = self.state();
                share.buckets().any(|b| state.in_flight[b.index()] > 0)
            };
            if !busy {
                return;
            }
            ended.await;
        }
    }

    /// Serves `share` besides what it serves.
    pub fn grant(&self, share: Share) {
        let mut state = self.state();
        state.served = Share::from_buckets(state.served.buckets().chain(share.buckets()));
        self.inner.served.send_replace(state.served);
    }

    /// A receiver of the buckets served, as they change.
    #[must_use]
    pub fn served_changes(&self) -> watch::Receiver<Share> {
        self.inner.served.subscribe()
    }

    /// The buckets the watches should select (`None`: all, unsharded).
    #[must_use]
    pub fn watched(&self) -> watch::Receiver<Option<Share>> {
        self.inner.watched.subscribe()
    }

    /// Asks the watches for `share`.
    pub fn watch(&self, share: Share) {
        self.inner.watched.send_if_modified(|watched| {
            let changed = *watched != Some(share);
            *watched = Some(share);
            changed
        });
    }

    /// Registers a watch stream; it reports each share it has listed.
    #[must_use]
    pub fn stream(&self) -> usize {
        let mut id = 0;
        self.inner.synced.send_modify(|synced| {
            id = synced.len();
            synced.push(Share::default());
        });
        id
    }

    /// Stream `id` has listed `share` and follows it.
    pub fn listed(&self, id: usize, share: Share) {
        self.inner.synced.send_modify(|synced| {
            if let Some(slot) = synced.get_mut(id) {
                *slot = share;
            }
        });
    }

    /// Whether every stream has listed a share holding all of `share`.
    #[must_use]
    pub fn is_listed(&self, share: Share) -> bool {
        self.inner
            .synced
            .borrow()
            .iter()
            .all(|s| share.without(*s).is_empty())
    }

    /// Waits until every stream has listed a share holding all of `share`.
    pub async fn until_listed(&self, share: Share) {
        let mut synced = self.inner.synced.subscribe();
        let _ = synced
            .wait_for(|streams| streams.iter().all(|s| share.without(*s).is_empty()))
            .await;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain counters: a poisoned lock still holds consistent values.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A call in flight in one bucket.
pub struct InFlight {
    serving: Serving,
    bucket: Bucket,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.serving.state().in_flight[self.bucket.index()] -= 1;
        self.serving.inner.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn uid_in(share: Share) -> String {
        (0..)
            .map(|i| format!("uid-{i:08x}-{}", i * 7919))
            .find(|uid| share.owns_uid(uid))
            .unwrap()
    }

    #[tokio::test]
    async fn a_withdrawn_bucket_starts_nothing_and_drains_what_runs() {
        let serving = Serving::sharded();
        let half = Share::from_buckets((0..32).filter_map(Bucket::new));
        let uid = uid_in(half);
        assert!(serving.begin(&uid).is_none(), "nothing served yet");
        serving.grant(half);
        let call = serving.begin(&uid).expect("served");
        serving.withdraw(half);
        assert!(serving.begin(&uid).is_none(), "withdrawn");
        let drained = tokio::spawn({
            let serving = serving.clone();
            async move { serving.drained(half).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!drained.is_finished(), "a call is still in flight");
        drop(call);
        tokio::time::timeout(Duration::from_secs(5), drained)
            .await
            .expect("drained once the call ends")
            .unwrap();
    }

    #[tokio::test]
    async fn a_share_is_listed_once_every_stream_has_listed_it() {
        let serving = Serving::sharded();
        let (a, b) = (serving.stream(), serving.stream());
        let half = Share::from_buckets((0..32).filter_map(Bucket::new));
        let waiting = tokio::spawn({
            let serving = serving.clone();
            async move { serving.until_listed(half).await }
        });
        serving.listed(a, Share::ALL);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "one stream has not listed it");
        serving.listed(b, half);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("listed by both")
            .unwrap();
        assert!(Serving::everything().begin("any").is_some());
    }
}
