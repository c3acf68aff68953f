//! A deduplicating work queue with delayed and rate-limited adds, served
//! fairly between tenants.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

use super::backoff::Backoff;
use super::cause::Cause;
use crate::fair::{Ledger, Tenant};

/// Tells whose a key is (for the controller: the policy of the DataJob).
pub type Classify<K> = Box<dyn Fn(&K) -> Tenant + Send + Sync>;

/// A queue of keys to reconcile, with client-go's workqueue semantics.
///
/// # Guarantees
/// - **Dedup**: a key is queued at most once; adding a queued key is a no-op.
/// - **No concurrent work on a key**: a key handed out by [`next`](Self::next)
///   is not handed out again until its [`Lease`] is dropped. Adds meanwhile mark
///   it dirty and it is queued again when the lease ends, so no change is lost.
/// - **Delays**: [`add_after`](Self::add_after) keeps the earliest pending time
///   per key; [`add_rate_limited`](Self::add_rate_limited) delays by the key's
///   exponential [`Backoff`] until [`forget`](Self::forget) resets it;
///   [`add_coalesced`](Self::add_coalesced) delays a key not queued already,
///   so one pass answers a burst of adds; [`add_settled`](Self::add_settled)
///   too, but the pass comes as soon as the burst has gone quiet.
/// - **Queue time**: a [`Lease`] tells when its key was first queued since it
///   was last handed out ([`Lease::queued_at`]; for a delayed add, when the
///   delay ended, and [`Lease::delayed_since`] when it began), so a worker
///   can measure enqueue-to-done latency, and why ([`Lease::cause`]).
/// - **Fair between tenants** (with [`with_tenants`](Self::with_tenants)):
///   each tenant has its own ready line; [`next`](Self::next) serves the
///   tenant holding the fewest leases per unit of share (see
///   [`crate::fair`]), first in, first out within a tenant. It is work
///   conserving: a tenant alone gets every worker. Without a classifier
///   every key is the host's, and the queue is one first-in, first-out line.
///
/// Concurrency is bounded by the number of workers calling `next`.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    wake: Notify,
    backoff: Backoff,
    classify: Option<Classify<K>>,
}

struct State<K> {
    /// Keys ready to be handed out, per tenant.
    ready: Ready<K>,
    /// Keys that need work (queued, or changed while being worked on), with
    /// the time each was first queued since it was last handed out, whose
    /// it was then and why.
    dirty: HashMap<K, Queued>,
    /// Keys handed out and not yet done, with the tenant each counts
    /// against and when it was handed out.
    processing: HashMap<K, (Arc<str>, Instant)>,
    /// Delayed adds, earliest first; `seq` breaks ties.
    waiting: BTreeSet<(Instant, u64, K)>,
    /// The pending delayed add of each waiting key.
    waiting_until: HashMap<K, Waiting>,
    /// Consecutive failures per key.
    failures: HashMap<K, u32>,
    /// Keys made dirty so far (an add of a dirty key is not counted).
    adds: u64,
    /// Delayed adds so far.
    retries: u64,
    next_seq: u64,
    shut_down: bool,
}

/// How a dirty key was first queued since it was last handed out.
struct Queued {
    at: Instant,
    tenant: Tenant,
    cause: Cause,
    /// When the delayed add that queued it was asked, if one did.
    delayed_since: Option<Instant>,
}

/// A delayed add: when it is due (and the tie-breaking `seq` of its entry
/// in `waiting`), whose key it is, why and since when.
struct Waiting {
    at: Instant,
    seq: u64,
    tenant: Tenant,
    cause: Cause,
    since: Instant,
}

/// When a delayed add wants its key queued.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// After this long; an earlier pending time wins.
    After(Duration),
    /// `quiet` after this add, but no later than `window` after the add
    /// that started the pending wait of a child's change.
    Quiet { quiet: Duration, window: Duration },
}

impl Due {
    fn is_now(self) -> bool {
        match self {
            Self::After(delay) => delay.is_zero(),
            Self::Quiet { quiet, window } => quiet.is_zero() || window.is_zero(),
        }
    }

    /// When the key falls due, and since when it waits, given its pending
    /// wait; `None` leaves that wait as it is.
    fn at(self, now: Instant, pending: Option<&Waiting>) -> Option<(Instant, Instant)> {
        let (at, since) = match (self, pending) {
            (Self::Quiet { quiet, window }, Some(pending))
                if pending.cause == Cause::ChildChanged =>
            {
                let at = (now + quiet).min(pending.since + window);
                return (at != pending.at).then_some((at, pending.since));
            }
            (Self::Quiet { quiet, window }, _) => (now + quiet.min(window), now),
            (Self::After(delay), _) => (now + delay, now),
        };
        match pending {
            Some(pending) if pending.at <= at => None,
            _ => Some((at, since)),
        }
    }
}

/// The ready keys: one first-in, first-out line per tenant, and the ledger
/// that picks which line goes next.
struct Ready<K> {
    lines: HashMap<Arc<str>, VecDeque<K>>,
    ledger: Ledger,
    len: usize,
}

impl<K> Ready<K> {
    fn push(&mut self, key: K, tenant: &Tenant) {
        self.ledger.enter(tenant);
        self.lines
            .entry(Arc::clone(tenant.key()))
            .or_default()
            .push_back(key);
        self.len += 1;
    }

    /// The next key by the ledger's choice of tenant, counted as held.
    fn pop(&mut self) -> Option<(K, Arc<str>)> {
        let tenant = Arc::clone(self.ledger.pick(self.lines.keys())?);
        let line = self.lines.get_mut(&tenant)?;
        let key = line.pop_front()?;
        if line.is_empty() {
            self.lines.remove(&tenant);
        }
        self.len -= 1;
        self.ledger.grant(&tenant);
        Some((key, tenant))
    }

    /// A lease of `tenant` ended.
    fn release(&mut self, tenant: &str) {
        self.ledger.release(tenant);
        if !self.lines.contains_key(tenant) {
            self.ledger.retire(tenant);
        }
    }
}

/// A snapshot of a queue ([`WorkQueue::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Keys ready to be worked on now.
    pub ready: usize,
    /// Keys handed out and not yet done.
    pub in_flight: usize,
    /// Keys made dirty so far: an add of a key already waiting is not one.
    pub adds: u64,
    /// Delayed adds so far (requeue-after, backoff, coalescing).
    pub retries: u64,
    /// The work in flight so far: the sum, over the keys handed out and
    /// not yet done, of the time since each was handed out.
    pub unfinished: Duration,
    /// The longest of those.
    pub longest: Duration,
}

/// A key handed out by [`WorkQueue::next`]; dropping it marks the work done.
pub struct Lease<K: Clone + Eq + Hash + Ord> {
    key: K,
    queued_at: Instant,
    delayed_since: Option<Instant>,
    cause: Cause,
    tenant: Tenant,
    queue: Arc<WorkQueue<K>>,
}

impl<K: Clone + Eq + Hash + Ord> Lease<K> {
    /// The key to work on.
    #[must_use]
    pub fn key(&self) -> &K {
        &self.key
    }

    /// When the key was first queued since it was last handed out: adds
    /// while it waited (or while an earlier lease was held) do not move it,
    /// and a delayed add counts from the end of its delay.
    #[must_use]
    pub fn queued_at(&self) -> Instant {
        self.queued_at
    }

    /// When the delayed add that queued the key was asked (a requeue, a
    /// backoff, a settle window), if one did: the delay ran from then to
    /// [`queued_at`](Self::queued_at).
    #[must_use]
    pub fn delayed_since(&self) -> Option<Instant> {
        self.delayed_since
    }

    /// Why the key was queued: the first reason since it was last handed
    /// out.
    #[must_use]
    pub fn cause(&self) -> Cause {
        self.cause
    }

    /// Whose key it is: the tenant it was handed out under.
    #[must_use]
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }
}

impl<K: Clone + Eq + Hash + Ord> Drop for Lease<K> {
    fn drop(&mut self) {
        self.queue.done(&self.key);
    }
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// An empty queue retrying failed keys with `backoff`.
    #[must_use]
    pub fn new(backoff: Backoff) -> Arc<Self> {
        Self::build(backoff, None)
    }

    /// An empty queue that serves the tenants `classify` tells apart
    /// fairly. `classify` runs when a key is added, outside the queue's
    /// lock (it may read caches that have their own).
    #[must_use]
    pub fn with_tenants(
        backoff: Backoff,
        classify: impl Fn(&K) -> Tenant + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::build(backoff, Some(Box::new(classify)))
    }

    fn build(backoff: Backoff, classify: Option<Classify<K>>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                ready: Ready {
                    lines: HashMap::new(),
                    ledger: Ledger::new(),
                    len: 0,
                },
                dirty: HashMap::new(),
                processing: HashMap::new(),
                waiting: BTreeSet::new(),
                waiting_until: HashMap::new(),
                failures: HashMap::new(),
                adds: 0,
                retries: 0,
                next_seq: 0,
                shut_down: false,
            }),
            wake: Notify::new(),
            backoff,
            classify,
        })
    }

    fn tenant_of(&self, key: &K) -> Tenant {
        self.classify
            .as_ref()
            .map_or_else(Tenant::host, |classify| classify(key))
    }

    /// Queues `key` now (unless it is already queued): its object changed.
    pub fn add(&self, key: K) {
        self.add_because(key, Cause::Changed);
    }

    /// Queues `key` now (unless it is already queued), for `cause`.
    pub fn add_because(&self, key: K, cause: Cause) {
        let tenant = self.tenant_of(&key);
        let mut state = self.lock();
        let queued = Queued {
            at: Instant::now(),
            tenant,
            cause,
            delayed_since: None,
        };
        if state.enqueue(key, queued) {
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Queues `key` after `delay` (it asked to be requeued); an earlier
    /// pending time for the key wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.delay(key, Due::After(delay), false, Cause::Requeued);
    }

    /// Queues `key` after `window`, unless it is already queued (or changed
    /// while in flight) or waiting for an earlier time: a burst of changes
    /// within the window costs one pass, which sees them all.
    /// The cause is a child's change: a burst of them is what coalescing is
    /// for.
    pub fn add_coalesced(&self, key: K, window: Duration) {
        self.delay(key, Due::After(window), true, Cause::ChildChanged);
    }

    /// Queues `key` once its adds have gone `quiet` for that long, and no
    /// later than `window` after the first add of the burst (the one that
    /// started its wait, coalesced or settled): a burst costs one pass, and
    /// that pass comes as soon as the burst is over. An earlier pending
    /// time for another cause wins; a queued (or changed while in flight)
    /// key waits for nothing.
    pub fn add_settled(&self, key: K, quiet: Duration, window: Duration) {
        self.delay(key, Due::Quiet { quiet, window }, true, Cause::ChildChanged);
    }

    fn delay(&self, key: K, due: Due, unless_dirty: bool, cause: Cause) {
        if due.is_now() {
            return self.add_because(key, cause);
        }
        let now = Instant::now();
        let tenant = self.tenant_of(&key);
        let mut state = self.lock();
        if state.shut_down || (unless_dirty && state.dirty.contains_key(&key)) {
            return;
        }
        state.retries += 1;
        let pending = state.waiting_until.get(&key);
        let Some((at, since)) = due.at(now, pending) else {
            return;
        };
        if let Some(entry) = pending.map(|pending| (pending.at, pending.seq, key.clone())) {
            state.waiting.remove(&entry);
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.waiting.insert((at, seq, key.clone()));
        let waiting = Waiting {
            at,
            seq,
            tenant,
            cause,
            since,
        };
        state.waiting_until.insert(key, waiting);
        drop(state);
        // A sleeping worker may need to wake earlier than it planned.
        self.wake.notify_waiters();
    }

    /// Counts a failure of `key` and queues it after its backoff; returns the delay.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let failures = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
            *failures
        };
        let delay = self.backoff.delay(failures);
        self.delay(key, Due::After(delay), false, Cause::Retried);
        delay
    }

    /// Resets the failure count of `key` (after it succeeded, or was deleted).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// How many times in a row `key` has failed.
    #[must_use]
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keys ready to be worked on now (the queue depth).
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().ready.len
    }

    /// True when no key is ready now.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for a delay to pass.
    #[must_use]
    pub fn delayed(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Keys being worked on.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.lock().processing.len()
    }

    /// What the queue holds and has done so far, as client-go's workqueue
    /// reports it to its metrics.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let state = self.lock();
        let now = Instant::now();
        let running = state.processing.values().map(|(_, since)| now - *since);
        let (unfinished, longest) = running
            .fold((Duration::ZERO, Duration::ZERO), |(sum, max), d| {
                (sum + d, max.max(d))
            });
        Stats {
            ready: state.ready.len,
            in_flight: state.processing.len(),
            adds: state.adds,
            retries: state.retries,
            unfinished,
            longest,
        }
    }

    /// Stops handing out keys: `next` returns `None` from now on.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_waiters();
    }

    /// Waits for the next key to work on; `None` once the queue is shut down.
    pub async fn next(self: &Arc<Self>) -> Option<Lease<K>> {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Register before looking, so an add between the look and the wait wakes us.
            woken.as_mut().enable();
            let wake_at = {
                let mut state = self.lock();
                if state.shut_down {
                    return None;
                }
                state.promote_due(Instant::now());
                if let Some((key, held_by)) = state.ready.pop() {
                    // A ready key is always dirty; the fallback is never used.
                    let queued = state.dirty.remove(&key).unwrap_or_else(|| Queued {
                        at: Instant::now(),
                        tenant: Tenant::host(),
                        cause: Cause::Changed,
                        delayed_since: None,
                    });
                    state
                        .processing
                        .insert(key.clone(), (held_by, Instant::now()));
                    let more = state.ready.len > 0;
                    drop(state);
                    if more {
                        self.wake.notify_one();
                    }
                    return Some(Lease {
                        key,
                        queued_at: queued.at,
                        delayed_since: queued.delayed_since,
                        cause: queued.cause,
                        tenant: queued.tenant,
                        queue: Arc::clone(self),
                    });
                }
                state.waiting.first().map(|(at, _, _)| *at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = woken => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => woken.await,
            }
        }
    }

    /// Ends work on `key`; re-queues it if it changed meanwhile.
    fn done(&self, key: &K) {
        let mut state = self.lock();
        if let Some((held_by, _)) = state.processing.remove(key) {
            state.ready.release(&held_by);
        }
        if state.shut_down {
            return;
        }
        if let Some(queued) = state.dirty.get(key) {
            let tenant = queued.tenant.clone();
            state.ready.push(key.clone(), &tenant);
            drop(state);
            self.wake.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // Every critical section leaves the state consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Clone + Eq + Hash + Ord> State<K> {
    /// Marks `key` dirty (as `queued`, unless it is dirty already) and
    /// queues it unless it is queued or in flight; true if queued now.
    fn enqueue(&mut self, key: K, queued: Queued) -> bool {
        if self.shut_down {
            return false;
        }
        let tenant = queued.tenant.clone();
        let key = match self.dirty.entry(key) {
            Entry::Occupied(_) => return false,
            Entry::Vacant(entry) => {
                let key = entry.key().clone();
                entry.insert(queued);
                key
            }
        };
        self.adds += 1;
        if self.processing.contains_key(&key) {
            return false;
        }
        self.ready.push(key, &tenant);
        true
    }

    /// Moves delayed keys whose time has come to the ready queue.
    fn promote_due(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.waiting.first() {
            if *at > now {
                break;
            }
            let Some((at, _, key)) = self.waiting.pop_first() else {
                break;
            };
            // Every entry of `waiting` has its `waiting_until`.
            let Some(waiting) = self.waiting_until.remove(&key) else {
                continue;
            };
            let queued = Queued {
                at,
                tenant: waiting.tenant,
                cause: waiting.cause,
                delayed_since: Some(waiting.since),
            };
            self.enqueue(key, queued);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Arc<WorkQueue<&'static str>> {
        WorkQueue::new(Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        })
    }

    async fn next_key(q: &Arc<WorkQueue<&'static str>>) -> Lease<&'static str> {
        tokio::time::timeout(Duration::from_secs(60), q.next())
            .await
            .expect("a key within the timeout")
            .expect("queue is running")
    }

    #[tokio::test(start_paused = true)]
    async fn stats_count_adds_once_per_wait_delayed_adds_and_the_work_in_flight() {
        let q = queue();
        q.add("a");
        q.add("a");
        q.add_after("b", Duration::from_secs(1));
        let stats = q.stats();
        assert_eq!((stats.ready, stats.adds, stats.retries), (1, 1, 1));
        let a = next_key(&q).await;
        tokio::time::advance(Duration::from_secs(2)).await;
        let b = next_key(&q).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let stats = q.stats();
        assert_eq!(stats.adds, 2, "b became dirty when its delay ended");
        assert_eq!(stats.in_flight, 2);
        assert_eq!(stats.longest, Duration::from_secs(3), "a, held 3 s");
        assert_eq!(
            stats.unfinished,
            Duration::from_secs(4),
            "3 s of a, 1 s of b"
        );
        drop((a, b));
        assert_eq!(q.stats().unfinished, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn adding_a_queued_key_again_is_a_no_op() {
        let q = queue();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(*next_key(&q).await.key(), "a");
        assert_eq!(*next_key(&q).await.key(), "b");
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_in_flight_is_not_handed_out_twice_but_requeued_when_done() {
        let q = queue();
        q.add("a");
        let lease = next_key(&q).await;
        q.add("a");
        assert_eq!(q.len(), 0, "in flight: the add only marks it dirty");
        let second = tokio::time::timeout(Duration::from_secs(5), q.next()).await;
        assert!(second.is_err(), "no second lease while the first is held");
        drop(lease);
        assert_eq!(*next_key(&q).await.key(), "a");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_hands_the_key_out_once_the_delay_passed() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_millis(500));
        assert_eq!(q.delayed(), 1);
        let lease = next_key(&q).await;
        assert_eq!(*lease.key(), "a");
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn the_earliest_pending_delay_wins() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(10));
        q.add_after("a", Duration::from_secs(2));
        q.add_after("a", Duration::from_secs(5));
        assert_eq!(q.delayed(), 1);
        next_key(&q).await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(q.delayed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_coalesced_adds_is_one_key_after_the_window() {
        let q = queue();
        let window = Duration::from_millis(200);
        q.add_coalesced("a", window);
        tokio::time::advance(Duration::from_millis(150)).await;
        q.add_coalesced("a", window);
        assert_eq!((q.len(), q.delayed()), (0, 1), "one key waits");
        let started = Instant::now();
        let lease = next_key(&q).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "the first add's window decides, a later add does not push it back"
        );
        assert_eq!(*lease.key(), "a");
        drop(lease);
        assert!(q.is_empty() && q.delayed() == 0, "no second pass follows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_burst_is_one_pass_once_it_goes_quiet() {
        let q = queue();
        let (quiet, window) = (Duration::from_millis(100), Duration::from_secs(1));
        let start = Instant::now();
        q.add_settled("a", quiet, window);
        tokio::time::advance(Duration::from_millis(60)).await;
        q.add_settled("a", quiet, window);
        tokio::time::advance(Duration::from_millis(60)).await;
        q.add_settled("a", quiet, window);
        assert_eq!((q.len(), q.delayed()), (0, 1), "one key waits");
        let lease = next_key(&q).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(220),
            "each add moves the pass to `quiet` after it"
        );
        assert_eq!(
            lease.delayed_since(),
            Some(start),
            "waiting since the first"
        );
        drop(lease);
        assert!(q.is_empty() && q.delayed() == 0, "no second pass follows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_burst_that_never_goes_quiet_is_answered_within_the_window() {
        let q = queue();
        let (quiet, window) = (Duration::from_millis(100), Duration::from_millis(500));
        let start = Instant::now();
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { next_key(&q).await.queued_at() })
        };
        for _ in 0..20 {
            q.add_settled("a", quiet, window);
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        let queued_at = worker.await.expect("the worker");
        assert_eq!(queued_at - start, window, "the window caps the wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_add_answers_a_coalesced_wait_early_and_never_late() {
        let q = queue();
        let (quiet, window) = (Duration::from_millis(100), Duration::from_secs(1));
        let start = Instant::now();
        q.add_coalesced("early", window);
        q.add_coalesced("capped", window);
        tokio::time::advance(Duration::from_millis(300)).await;
        q.add_settled("early", quiet, window);
        tokio::time::advance(Duration::from_millis(650)).await;
        q.add_settled("capped", quiet, window);
        let first = next_key(&q).await;
        assert_eq!(*first.key(), "early");
        assert_eq!(first.queued_at() - start, Duration::from_millis(400));
        let second = next_key(&q).await;
        assert_eq!(*second.key(), "capped");
        assert_eq!(
            second.queued_at() - start,
            window,
            "the coalesced wait's window still caps it"
        );
        q.add_settled("late", quiet, window);
        q.add_coalesced("late", window);
        tokio::time::advance(quiet).await;
        assert_eq!(
            *next_key(&q).await.key(),
            "late",
            "a coalesced add does not push a settled one back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_add_leaves_an_earlier_requeue_and_brings_a_later_one_forward() {
        let q = queue();
        let quiet = Duration::from_millis(100);
        let start = Instant::now();
        q.add_after("soon", Duration::from_millis(50));
        q.add_settled("soon", quiet, Duration::from_secs(1));
        q.add_after("later", Duration::from_secs(30));
        q.add_settled("later", quiet, Duration::from_secs(1));
        let soon = next_key(&q).await;
        assert_eq!(
            (*soon.key(), soon.cause(), soon.queued_at() - start),
            ("soon", Cause::Requeued, Duration::from_millis(50))
        );
        let later = next_key(&q).await;
        assert_eq!(
            (*later.key(), later.cause(), later.queued_at() - start),
            ("later", Cause::ChildChanged, quiet)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_coalesced_add_of_a_queued_or_changed_key_waits_for_nothing() {
        let q = queue();
        q.add("a");
        q.add_coalesced("a", Duration::from_secs(1));
        assert_eq!((q.len(), q.delayed()), (1, 0), "queued already: no-op");
        let lease = next_key(&q).await;
        q.add_coalesced("a", Duration::from_secs(1));
        assert_eq!(
            q.delayed(),
            1,
            "in flight and unchanged: the window applies"
        );
        q.add("a");
        q.add_coalesced("a", Duration::from_millis(10));
        assert_eq!(q.delayed(), 1, "changed while in flight: no second wait");
        drop(lease);
        assert_eq!(q.len(), 1, "requeued as soon as the lease ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_wakes_for_an_earlier_delayed_add() {
        let q = queue();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(60));
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { *next_key(&q).await.key() })
        };
        tokio::task::yield_now().await;
        q.add_after("soon", Duration::from_secs(1));
        assert_eq!(worker.await.expect("worker"), "soon");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let q = queue();
        let delays: Vec<u128> = (0..5)
            .map(|_| q.add_rate_limited("a").as_millis())
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000]);
        assert_eq!(q.failures(&"a"), 5);
        q.forget(&"a");
        assert_eq!(q.failures(&"a"), 0);
        assert_eq!(q.add_rate_limited("a"), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_releases_waiting_workers() {
        let q = queue();
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.next().await.is_none() })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert!(worker.await.expect("worker"));
        q.add("a");
        assert!(q.is_empty(), "adds after shutdown are dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_tells_when_its_key_was_first_queued() {
        let q = queue();
        let first = Instant::now();
        q.add("a");
        tokio::time::advance(Duration::from_millis(300)).await;
        q.add("a");
        tokio::time::advance(Duration::from_millis(200)).await;
        let lease = next_key(&q).await;
        assert_eq!(lease.queued_at(), first, "a second add does not move it");
        assert_eq!(lease.queued_at().elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn an_add_while_in_flight_counts_from_that_add() {
        let q = queue();
        q.add("a");
        let lease = next_key(&q).await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let changed = Instant::now();
        q.add("a");
        tokio::time::advance(Duration::from_millis(400)).await;
        q.add("a");
        drop(lease);
        let again = next_key(&q).await;
        assert_eq!(again.queued_at(), changed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_counts_from_the_end_of_its_delay() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(2));
        // No worker asks until well after the delay ended.
        tokio::time::advance(Duration::from_secs(5)).await;
        let lease = next_key(&q).await;
        assert_eq!(lease.queued_at(), start + Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_tells_why_and_since_when_its_key_was_queued() {
        let q = queue();
        let start = Instant::now();
        q.add_coalesced("child", Duration::from_secs(1));
        q.add_after("requeued", Duration::from_secs(2));
        q.add_because("resynced", Cause::Resynced);
        q.add("resynced");
        q.add_rate_limited("failed");
        tokio::time::advance(Duration::from_secs(3)).await;
        let mut seen = Vec::new();
        for _ in 0..4 {
            let lease = next_key(&q).await;
            let since = lease.delayed_since().map(|at| at - start);
            seen.push((*lease.key(), lease.cause(), since));
        }
        seen.sort_by_key(|(key, _, _)| *key);
        assert_eq!(
            seen,
            [
                ("child", Cause::ChildChanged, Some(Duration::ZERO)),
                ("failed", Cause::Retried, Some(Duration::ZERO)),
                ("requeued", Cause::Requeued, Some(Duration::ZERO)),
                ("resynced", Cause::Resynced, None),
            ],
            "the first cause wins; a delayed add tells when it was asked"
        );
        q.add("child");
        q.add_coalesced("child", Duration::from_secs(1));
        assert_eq!(next_key(&q).await.cause(), Cause::Changed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_of_a_queued_key_keeps_the_earlier_time() {
        let q = queue();
        let first = Instant::now();
        q.add("a");
        q.add_after("a", Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(3)).await;
        let lease = next_key(&q).await;
        assert_eq!(lease.queued_at(), first);
        drop(lease);
        assert!(
            q.is_empty(),
            "the due add found the key queued: no second pass"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_added_key_is_handed_out_to_one_of_many_workers() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new(Backoff::default());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = Arc::clone(&q);
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    while let Some(lease) = q.next().await {
                        seen.push(*lease.key());
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                    seen
                })
            })
            .collect();
        for key in 0..100 {
            q.add(key);
        }
        while !(q.is_empty() && q.in_flight() == 0) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        let mut seen = Vec::new();
        for worker in workers {
            seen.extend(worker.await.expect("worker"));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }

    /// A queue whose keys `"<tenant>/<n>"` belong to `<tenant>`, of share
    /// 3 for `three` and 1 otherwise.
    fn tenant_queue() -> Arc<WorkQueue<String>> {
        WorkQueue::with_tenants(Backoff::default(), |key: &String| {
            let name = key.split('/').next().unwrap_or_default();
            let share = if name == "three" { 3 } else { 1 };
            Tenant::new(name, crate::fair::Share::new(share).expect("non-zero"))
        })
    }

    async fn next_string(q: &Arc<WorkQueue<String>>) -> Lease<String> {
        tokio::time::timeout(Duration::from_secs(60), q.next())
            .await
            .expect("a key within the timeout")
            .expect("queue is running")
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_queued_behind_a_hundred_keys_of_another_is_served_second() {
        let q = tenant_queue();
        for n in 0..100 {
            q.add(format!("noisy/{n}"));
        }
        q.add("quiet/0".to_owned());
        let first = next_string(&q).await;
        let second = next_string(&q).await;
        assert_eq!(first.key(), "noisy/0");
        assert_eq!(second.key(), "quiet/0", "not behind the other 99");
        assert_eq!(second.tenant().name(), "quiet");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_alone_gets_every_worker_in_order() {
        let q = tenant_queue();
        for n in 0..8 {
            q.add(format!("alone/{n}"));
        }
        let mut leases = Vec::new();
        for _ in 0..8 {
            leases.push(next_string(&q).await);
        }
        let keys: Vec<&str> = leases.iter().map(|l| l.key().as_str()).collect();
        assert_eq!(
            keys,
            (0..8).map(|n| format!("alone/{n}")).collect::<Vec<_>>()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn leases_held_follow_the_shares_while_both_tenants_have_keys() {
        let q = tenant_queue();
        for n in 0..50 {
            q.add(format!("three/{n}"));
            q.add(format!("one/{n}"));
        }
        let mut held: Vec<Lease<String>> = Vec::new();
        for _ in 0..8 {
            held.push(next_string(&q).await);
        }
        // Workers finish one at a time and take the next key.
        for _ in 0..40 {
            held.remove(0);
            held.push(next_string(&q).await);
        }
        let three = held.iter().filter(|l| l.tenant().name() == "three").count();
        assert_eq!((three, held.len() - three), (6, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_in_flight_comes_back_under_its_tenant() {
        let q = tenant_queue();
        q.add("quiet/0".to_owned());
        let lease = next_string(&q).await;
        q.add("quiet/0".to_owned());
        drop(lease);
        let again = next_string(&q).await;
        assert_eq!(again.tenant().name(), "quiet");
        assert_eq!(q.in_flight(), 1);
    }
}
